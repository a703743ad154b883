"""The count every arrival-aware plan makes before extracting (pure arithmetic): a shortcut only.

An arrival-aware window (:mod:`pipeline.source.window`) reads of the look-back only the rows that
arrived after the last plan's mark. That is an optimisation, never a decision: a writer that
stamps ``created_at`` from a clock behind the database's, a backfill or replay carrying old
times, a business column named ``created_at``, a session with ``track_activities`` off, a
subscriber or a foreign table all put rows in the look-back whose arrival time is behind the
mark. What decides is the identity check after promotion (:mod:`pipeline.load.proof`): the ids
the lake holds in the window's range against the ids the planner's snapshot holds there; rows
still missing are read at once with the whole look-back.

This count, made before extracting, only saves that second pass: when the source holds more
rows in the range than the lake plus what the window reads (:attr:`Completeness.behind` > 0),
the run reads the whole look-back from the start. Counts cannot see identity (a deleted row and
a backfilled one cancel out), which is why they never end the check.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Completeness:
    """The three counts of one run's check, all over the window's time range ``(low, upper]``."""

    source_rows: int  # source rows dated in the range, in the planner's snapshot
    lake_rows: int  # rows the lake holds dated in the range (events, plus quarantined rows), before the run
    window_rows: int  # rows the arrival-aware window reads

    @property
    def expected_new(self) -> int:
        """Rows the run must add for the lake to hold the whole range."""
        return max(0, self.source_rows - self.lake_rows)

    @property
    def behind(self) -> int:
        """Rows the window cannot read although the lake lacks them: they arrived behind the mark."""
        return max(0, self.expected_new - self.window_rows)

