"""The check every run makes that an arrival-aware window missed no row (pure arithmetic).

An arrival-aware window (:mod:`pipeline.source.window`) reads of the look-back only the rows that
arrived after the last plan's mark. That is an optimisation, never a decision: a writer that
stamps ``created_at`` from a clock behind the database's, a backfill or replay carrying old
times, a business column named ``created_at``, a session with ``track_activities`` off, a
subscriber or a foreign table all put rows in the look-back whose arrival time is behind the
mark. So every such run also counts, in the planner's snapshot, the source rows dated in the
window (an index-only count on ``event_timestamp``) and, in the lake, the rows it holds dated
there (loaded or quarantined). The lake plus what the window reads must reach the source:

* short before extracting (:attr:`Completeness.behind` > 0): the run reads the whole look-back;
* short after promoting (rows the window read were duplicates, so the count hid a gap:
  :meth:`Completeness.shortfall` > 0): the run reads the whole look-back again at once.

Either way the lake holds every source row of the window when the run ends. A lake holding more
than the source (:attr:`Completeness.surplus`) means rows were deleted or moved (an UPDATE of
``event_timestamp``) in the source after they were loaded: reported, never repaired silently.
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

    @property
    def surplus(self) -> int:
        """Rows the lake holds in the range that the source no longer has there."""
        return max(0, self.lake_rows - self.source_rows)

    def shortfall(self, loaded: int) -> int:
        """After promotion of ``loaded`` new rows (inserted or quarantined): rows still missing."""
        return max(0, self.expected_new - loaded)
