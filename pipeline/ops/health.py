"""Pure judgement of the pipeline's health for ``--status``: healthy, stale or failing.

Exit codes (documented in docs/running.md, used by process managers and monitors):
0 healthy, 1 stale (no successful load for two LOAD_EVERY intervals while the source holds
rows, or never loaded), 2 failing (the last load failed, or batches are set aside).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from pipeline import actions
from pipeline.settings.durations import format_duration

HEALTHY, STALE, FAILING = 0, 1, 2
STATES = {HEALTHY: "healthy", STALE: "stale", FAILING: "failing"}
STALE_AFTER_INTERVALS = 2  # one missed load is normal jitter; two are not
# rows dated further than this after the source's clock are no clock jitter: most likely naive
# timestamps written in another zone than the source's (they would wait hours to load)
FUTURE_TOLERANCE = timedelta(minutes=5)
# the furthest a time zone is ahead of UTC (UTC+14): rows dated further ahead than that are no
# naive timestamps written in another zone, only future-dated rows (loaded when due)
ZONE_SPAN = timedelta(hours=14)


@dataclass(frozen=True)
class Health:
    code: int
    reasons: list[str] = field(default_factory=list)
    last_success: datetime | None = None
    seconds_since_success: float | None = None
    # how long after the last success the pipeline is stale (None: never by age: nothing to load)
    stale_after: float | None = None

    @property
    def state(self) -> str:
        return STATES[self.code]

    def as_dict(self) -> dict[str, object]:
        return {"state": self.state, "exit_code": self.code, "reasons": self.reasons,
                "last_successful_load": self.last_success.isoformat() if self.last_success else None,
                "seconds_since_successful_load": self.seconds_since_success}


@dataclass(frozen=True)
class Cadence:
    """How often loads run, as the process that ran the last one said: stale after two intervals,
    plus how seldom a follower writes its record (a follower loads every few seconds and records
    a minute of loads at a time)."""

    every: timedelta
    name: str = "LOAD_EVERY"  # the setting it came from, for the message
    recorded_every: timedelta = timedelta(0)

    @property
    def stale_after(self) -> timedelta:
        return STALE_AFTER_INTERVALS * self.every + self.recorded_every

    def describe(self) -> str:
        recorded = f", recorded every {format_duration(self.recorded_every)}" if self.recorded_every else ""
        return f"{self.name} {format_duration(self.every)}{recorded}"


def assess(now: datetime, load_every: timedelta | Cadence, last_success: datetime | None,
           last_load_status: str | None, last_load_error: str | None, set_aside: int, source_rows: int,
           far_future: int = 0, source_error: str | None = None, lake_surplus: int = 0,
           lake_damage: Sequence[str] = (), lake_changed: int = 0) -> Health:
    """``last_success``: the newest successful load (a scheduled or manual run's job record, or
    a promoted batch); ``source_rows``: rows the source holds (0: nothing to be stale about);
    ``far_future``: rows dated more than :data:`FUTURE_TOLERANCE`, and at most a time zone's offset
    (:data:`ZONE_SPAN`) more, after the source's clock;
    ``source_error``: why the source could not be read (no load can succeed: failing);
    ``lake_surplus``: rows the lake holds in the look-back that the source no longer has there;
    ``lake_changed``: rows it holds there whose contents the source changed since;
    ``lake_damage``: what no longer matches the catalog in the data folder (files, the marker)."""
    cadence = load_every if isinstance(load_every, Cadence) else Cadence(load_every)
    failing, stale = list(lake_damage), []
    if source_error:
        failing.append(f"the source cannot be read: {source_error}")
    if last_load_status == "failed":
        error = last_load_error or f"see the job history ({actions.STATUS})"
        failing.append(f"the last load failed: {error}")
    if set_aside:
        failing.append(f"{set_aside} batch(es) set aside (fix the cause, then {actions.RETRY_FAILED})")
    if lake_surplus:
        failing.append(f"the lake holds {lake_surplus} row(s) dated in the look-back that the source no "
                       "longer has there: they were deleted, or their event_timestamp updated, after loading "
                       f"(an id is loaded once). {actions.REPAIR} {actions.SINCE} <range> replaces them with "
                       "the source's rows in one snapshot (time travel keeps the old ones); or restore them "
                       "in the source")
    if lake_changed:
        failing.append(f"the lake holds {lake_changed} row(s) dated in the look-back whose contents the "
                       "source changed after loading (same id; an id is loaded once). "
                       f"{actions.REPAIR} {actions.SINCE} <range> replaces them with the source's rows in "
                       f"one snapshot (time travel keeps the old values); {actions.VERIFY} names them")
    since = (now - last_success).total_seconds() if last_success else None
    if last_success is None:  # a lake that never loaded is never healthy, whatever the source holds
        stale.append(f"nothing loaded yet, while the source holds {source_rows} row(s)" if source_rows
                     else f"nothing loaded yet (run {actions.RUN}, or start a scheduler)")
    elif since is not None and source_rows and since > cadence.stale_after.total_seconds():
        stale.append(f"the last successful load was {_ago(since)} ago ({cadence.describe()})")
    if far_future:
        stale.append(f"{far_future} row(s) are dated more than {format_duration(FUTURE_TOLERANCE)} after the "
                     "source's clock and wait until then; if they are naive timestamps written in another "
                     "time zone, set SOURCE_TIMEZONE to it")
    code = FAILING if failing else STALE if stale else HEALTHY
    return Health(code, failing + stale, last_success, since,
                  cadence.stale_after.total_seconds() if source_rows else None)


def aged(judged: Health, note: str) -> Health:
    """``judged``, as an answer older than it should be says it: stale when the time since the last
    success, counted to now, passed the cadence's bound (``note`` says as of what)."""
    since, bound = judged.seconds_since_success, judged.stale_after
    if judged.code != HEALTHY or since is None or bound is None or since <= bound:
        return judged
    return replace(judged, code=STALE,
                   reasons=[*judged.reasons, f"the last successful load was {_ago(since)} ago ({note})"])


def unreadable(error: object, now: datetime | None = None, last_success: datetime | None = None) -> Health:
    """A lake that cannot be read (its catalog or object store away) is failing, as a source
    that cannot be read is; the time since the last known success keeps counting."""
    since = (now - last_success).total_seconds() if now and last_success else None
    return Health(FAILING, [f"the lake cannot be read: {error}"], last_success, since)


def _ago(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:.0f}s"
