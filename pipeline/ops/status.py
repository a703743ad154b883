"""``--status``: where the pipeline stands (watermark, lag, last batches, snapshots), as a
:class:`Status` that the command's output, ``/metrics``, ``/healthz`` and the dashboard read."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import psycopg

from pipeline import actions, staging
from pipeline.errors import (
    LakeNotCreated,
    PipelineError,
    SourceAccessDenied,
    SourceUnavailable,
    TerminalError,
    first_line,
)
from pipeline.image import image_watermark
from pipeline.lake import batches as batch_table
from pipeline.lake import divergences, integrity, jobs
from pipeline.lake.connect import lake_session
from pipeline.lake.divergences import Divergence
from pipeline.lake.identity import lake_id, table_names
from pipeline.lake.payload_fields import PayloadStatus
from pipeline.lake.schema import quarantined_rows
from pipeline.lake.session import Lake, LakeTable
from pipeline.lake.tombstones import receipts
from pipeline.lake.transaction import one_read
from pipeline.load import proof
from pipeline.load.plan import PULL_LIMIT
from pipeline.ops import health
from pipeline.ops.scheduler_state import SchedulerState, SchedulerStates
from pipeline.promote.schema_changes import FollowedChange, followed_changes
from pipeline.settings import ResolvedSettings, TableSpec
from pipeline.source import arrivals, stats
from pipeline.source.connect import connect as connect_source
from pipeline.source.shape import SourceRelation, check_shape
from pipeline.source.window import FINITE_FLOOR, complete_after, iso
from pipeline.sqltext import one_row

HOUR = timedelta(hours=1)  # --status and /metrics report the loads of the last hour


@dataclass(frozen=True)
class ArrivalFacts:
    """The arrival column: whether the database sets it, rows found behind the mark, what is done."""

    column: str | None = None
    set_by_database: bool | None = None
    rows_behind_mark_last_hour: int = 0
    note: str | None = None


@dataclass(frozen=True)
class History:
    """How far a history read in parts (BACKFILL_BATCH_ROWS) is: the lake's rows, those plus the
    source's after the watermark, and when it ends at the rate its parts were read."""

    rows_loaded: int
    rows_total: int
    eta_seconds: float | None

    def as_dict(self) -> dict[str, object]:
        return {"rows_loaded": self.rows_loaded, "rows_total": self.rows_total,
                "eta_seconds": None if self.eta_seconds is None else round(self.eta_seconds, 1)}

    def describe(self) -> str:
        share = 100 * self.rows_loaded / self.rows_total if self.rows_total else 0.0
        left = f", about {self.eta_seconds:,.0f}s left" if self.eta_seconds is not None else ""
        return f"{share:.0f}% of its history ({self.rows_loaded:,} of {self.rows_total:,} rows){left}"

    @staticmethod
    def of(loaded: int, pending: int | None, rate: float | None) -> History | None:
        """A table's history while it is read (None: nothing of it waits)."""
        if not pending:
            return None
        return History(loaded, loaded + pending, pending / rate if rate else None)

    @staticmethod
    def combined(parts: list[History]) -> History | None:
        if not parts:
            return None
        etas = [p.eta_seconds for p in parts]
        return History(sum(p.rows_loaded for p in parts), sum(p.rows_total for p in parts),
                       None if None in etas else max(e for e in etas if e is not None))


@dataclass(frozen=True)
class TableStatus:
    """One table's part of the status of an image of several tables (SOURCE_TABLES)."""

    lake: str  # the lake table, qualified
    health: health.Health
    watermark: datetime | None
    lag_seconds: float | None
    lake_rows: int
    source_rows_after_watermark: int | None
    source_error: str | None  # why the table's source could not be read (None: it could)
    rows_quarantined: int
    identity: proof.RangeCheck | None  # the look-back compared id by id (None: not compared)
    staged_batches_waiting: int
    catching_up: bool  # the table reads its history in bounded batches
    history: History | None = None  # while its history is read in parts
    payload: PayloadStatus = field(default_factory=PayloadStatus)  # typed keys, drift
    divergences: list[Divergence] = field(default_factory=list)  # seen by a check, not repaired yet
    schema_changes: list[FollowedChange] = field(default_factory=list)  # the source's, the lake followed

    @property
    def source_up(self) -> bool:
        return self.source_error is None

    def table_dict(self) -> dict[str, Any]:
        """Its part of the status document."""
        return {"lake": self.lake, "health": self.health.as_dict(), "watermark": _iso(self.watermark),
                "lag_seconds": self.lag_seconds, "lake_rows": self.lake_rows,
                "source_rows_after_watermark": self.source_rows_after_watermark,
                "rows_quarantined": self.rows_quarantined,
                "identity_check": self.identity.as_dict() if self.identity else None,
                "staged_batches_waiting": self.staged_batches_waiting, "catching_up": self.catching_up,
                "history": self.history.as_dict() if self.history else None,
                "payload": self.payload.as_dict(),
                "divergences": [d.as_dict() for d in self.divergences],
                "schema_changes": [c.as_dict() for c in self.schema_changes]}


@dataclass(frozen=True)
class Status:
    """Where one pipeline stands. Timestamps are instants; :meth:`as_dict` is ``--status --json``."""

    health: health.Health  # its exit code is --status's exit code
    lake: str  # the events table, qualified
    lake_exists: bool  # False until the first run creates it
    catalog: str  # described, without secrets
    data_path: str
    watermark: datetime | None = None
    source_error: str | None = None  # why the source could not be read (None: it could)
    source_newest_event: datetime | None = None
    lag_seconds: float | None = None
    source_rows_after_watermark: int | None = None
    source_rows_in_future: int | None = None  # dated after the source's clock: loaded when due
    rows_quarantined: int = 0  # in ops.quarantine, with their reasons
    arrivals: ArrivalFacts = field(default_factory=ArrivalFacts)
    lake_rows_not_in_source: int = 0  # in the look-back: deleted or moved in the source since loaded
    lake_rows_changed_in_source: int = 0  # in the look-back: same id, other contents in the source now
    identity: proof.RangeCheck | None = None  # the look-back compared by id and content (None: not compared)
    lake_rows: int = 0
    snapshot_count: int = 0
    latest_snapshot: int | None = None
    data_files: int = 0
    data_bytes: int = 0
    # every registered file present with its recorded size, the folder's marker this lake's
    integrity: integrity.Integrity | None = None
    staged_batches_waiting: int = 0
    # batches that could not be promoted, kept whole (batch_id, error, set_aside_at)
    set_aside_batches: list[dict[str, Any]] = field(default_factory=list)
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)  # job -> its last run
    scheduler: SchedulerState | None = None  # the running scheduler's state file
    last_batches: list[dict[str, object]] = field(default_factory=list)
    # loads of the last hour: rows read per row inserted, arrival -> commit seconds
    last_hour: batch_table.SteadyState | None = None
    # SOURCE_TABLES: each table's own part (this one is the whole: the worst health, every reason)
    tables: dict[str, TableStatus] = field(default_factory=dict)
    catching_up: bool = False  # a table's status: it reads its history in bounded batches
    history: History | None = None  # how far the histories read in parts are (None: none is)
    payload: PayloadStatus = field(default_factory=PayloadStatus)  # typed payload keys, and their drift
    # what a load's check, a part's proof or a reach-back saw differ, kept until repaired (any table)
    divergences: list[Divergence] = field(default_factory=list)
    schema_changes: list[FollowedChange] = field(default_factory=list)  # the source's, the lake followed

    @property
    def source_up(self) -> bool:
        return self.source_error is None

    def as_dict(self) -> dict[str, Any]:
        """The ``--status --json`` document (a contract: keys only ever added)."""
        return {
            "health": self.health.as_dict(), "lake": self.lake, "lake_exists": self.lake_exists,
            "catalog": self.catalog, "data_path": self.data_path, "watermark": _iso(self.watermark),
            "source_up": self.source_up, "source_error": self.source_error,
            "source_newest_event": _iso(self.source_newest_event), "lag_seconds": self.lag_seconds,
            "source_rows_after_watermark": self.source_rows_after_watermark,
            "source_rows_in_future": self.source_rows_in_future, "rows_quarantined": self.rows_quarantined,
            "arrivals": vars(self.arrivals), "lake_rows_not_in_source": self.lake_rows_not_in_source,
            "lake_rows_changed_in_source": self.lake_rows_changed_in_source,
            "identity_check": self.identity.as_dict() if self.identity else None,
            "lake_rows": self.lake_rows, "snapshot_count": self.snapshot_count,
            "latest_snapshot": self.latest_snapshot, "data_files": self.data_files,
            "data_bytes": self.data_bytes,
            "integrity": self.integrity.as_dict() if self.integrity else None,
            "staged_batches_waiting": self.staged_batches_waiting,
            "set_aside_batches": self.set_aside_batches,
            "jobs": self.jobs, "scheduler": self.scheduler,
            "last_batches": [{k: _iso(v) if isinstance(v, datetime) else v for k, v in b.items()}
                             for b in self.last_batches],
            "last_hour": self.last_hour,
            "history": self.history.as_dict() if self.history else None,
            "payload": self.payload.as_dict(),
            "divergences": [d.as_dict() | {"table": d.table} for d in self.divergences],
            "schema_changes": [c.as_dict() | {"table": c.table} for c in self.schema_changes],
            "tables": {name: table.table_dict() for name, table in self.tables.items()},
        }

    def part(self) -> TableStatus:
        """A table's status as its part of an image's."""
        return TableStatus(self.lake, self.health, self.watermark, self.lag_seconds, self.lake_rows,
                           self.source_rows_after_watermark, self.source_error, self.rows_quarantined,
                           self.identity, self.staged_batches_waiting, self.catching_up, self.history,
                           self.payload, self.divergences, self.schema_changes)


def _iso(value: datetime | None) -> str | None:
    return iso(value) if value else None


@dataclass
class LakeFacts:
    """What the whole lake holds (its snapshots, files, jobs, identity, erasures), read once for
    every table of the image; a lake not created yet (no run so far) holds nothing (``exists``
    False): a state, not an error."""

    exists: bool = False
    snapshots: int = 0
    latest: int | None = None
    files: int = 0
    size: int = 0
    job_runs: list[jobs.JobRun] = field(default_factory=list)
    lake_id: str | None = None
    integrity: integrity.Integrity | None = None
    erasures_interrupted: list[str] = field(default_factory=list)  # receipts a kill left 'erasing'

    @classmethod
    def read(cls, lake: Lake, tables: set[tuple[str, str]]) -> LakeFacts:
        """``tables``: the lake's tables (:func:`~pipeline.lake.identity.table_names`)."""
        facts = cls(exists=True)
        facts.snapshots, facts.latest = one_row(lake.execute(
            f"SELECT count(*), max(snapshot_id) FROM {lake.name}.snapshots()"))
        files, size = one_row(lake.execute(
            "SELECT coalesce(sum(file_count), 0), coalesce(sum(file_size_bytes), 0) "
            "FROM ducklake_table_info(?)", [lake.name]))
        facts.files, facts.size = int(files), int(size)
        facts.job_runs = jobs.last_runs(lake)
        if (lake.ops_schema, "lake_identity") in tables:
            facts.lake_id = lake_id(lake)
        facts.integrity = integrity.check(lake, tables)
        facts.erasures_interrupted = [r.erasure_id for r in receipts(lake) if not r.done]
        return facts


@dataclass
class TableFacts:
    """What the lake holds of one table, read in the lake's one read of a status (a table not made
    yet holds nothing: a table added to SOURCE_TABLES, made by its first load)."""

    watermark: datetime | None = None
    batches: list[dict[str, object]] = field(default_factory=list)  # the last ones, newest first
    # the last successful load that listed the table (another table's load is no success of its own:
    # a scheduler still running with the list before the table was added never loads it)
    last_load_success: datetime | None = None
    lake_rows: int = 0
    quarantined: int = 0
    last_hour: batch_table.SteadyState | None = None
    catching_up: bool = False  # the table's last batch was a bounded part of its history
    history_rate: float | None = None  # rows per second its history's parts were read at
    payload: PayloadStatus = field(default_factory=PayloadStatus)
    divergences: list[Divergence] = field(default_factory=list)  # seen by a check, not repaired yet
    schema_changes: list[FollowedChange] = field(default_factory=list)

    @classmethod
    def read(cls, table: LakeTable, tables: set[tuple[str, str]]) -> TableFacts:
        facts = cls()
        if (table.lake.ops_schema, "batches") in tables:
            where = batch_table.standing(table)  # its watermark and catch-up, in one read
            facts.watermark, facts.catching_up = where.watermark, where.catching_up is not None
            facts.batches = batch_table.recent_batches(table, 5)
            facts.last_hour = batch_table.steady_state(table, datetime.now(UTC) - HOUR)
            facts.history_rate = batch_table.history_rate(table) if facts.catching_up else None
            if ("main", table.name) in tables:
                facts.lake_rows = batch_table.rows_held(table)
        facts.last_load_success = jobs.last_success(table.lake, "load", table.name)
        facts.quarantined = quarantined_rows(table)
        facts.divergences = divergences.unrepaired(table)
        if (table.lake.ops_schema, "schema_changes") in tables:
            facts.schema_changes = followed_changes(table)
        return facts


def read_lake(settings: ResolvedSettings) -> tuple[LakeFacts, dict[str, TableFacts]]:
    """The lake's facts and each table's, in one lake session and one read transaction: one view of
    the lake, whose catalog DuckLake reads once for the dozens of reads, not once per table. Each
    table's payload keys and drift are read last, in a read of their own (a damaged file fails it)."""
    try:
        with lake_session(settings, read_only=True) as lake:
            with one_read(lake):
                tables = table_names(lake)
                wide = LakeFacts.read(lake, tables)
                each = {spec.name: TableFacts.read(lake.table_of(spec), tables) for spec in settings.tables}
            for spec in settings.tables:  # last, each in a read of its own: a damaged file fails its
                if ("main", spec.name) in tables:  # read and aborts the transaction it is read in
                    with one_read(lake):
                        each[spec.name].payload = PayloadStatus.of(lake.table_of(spec))
            return wide, each
    except LakeNotCreated:
        return LakeFacts(), {spec.name: TableFacts() for spec in settings.tables}


def _unrepaired(seen: list[Divergence], watermark: datetime | None, now: datetime) -> list[str]:
    """A divergence a check saw is failing until a repair over its range (or a later exact proof of
    it) clears it: the repair that does, as the user types it."""
    reasons = []
    for divergence in seen:
        # --repair compares SINCE before the watermark: from before the divergence's low, in whole hours
        # (one more than it is behind: 48 h and a microsecond is 49 h, not 48)
        behind = (watermark or now) - divergence.low if divergence.low is not None else None
        hours = None if behind is None else int(behind.total_seconds() // 3600) + 1
        repair = f"{actions.REPAIR} {actions.SINCE} {hours}h" if hours is not None else f"{actions.REPAIR}"
        reasons.append(f"{divergence.describe()}; the lake keeps it until repaired: {repair} replaces those "
                       f"rows with the source's in one snapshot ({actions.VERIFY} {actions.SINCE} all names "
                       "them)")
    return reasons


def _interrupted(erasures: list[str]) -> list[str]:
    """An erasure a kill interrupted: the current lake is without the subject, older snapshots and
    files may not be yet."""
    if not erasures:
        return []
    return [f"erasure {', '.join(erasures)} was interrupted: older snapshots and files may still hold the "
            f"subject's rows; run {actions.ERASE} with the same value again to complete it"]


def _cadence(load_every: timedelta, last_load: jobs.JobRun | None) -> health.Cadence:
    """The load cadence to judge staleness by: the one the scheduler or follower that ran the last
    load recorded (a stopped ``--load-every 30s`` scheduler is stale after a minute, a dead
    ``--follow --every 2s`` after its one-minute record and two intervals), else this process's
    LOAD_EVERY (manual or cron runs)."""
    try:
        details = json.loads(last_load["details"] or "{}") if last_load else {}
    except (TypeError, ValueError):
        details = {}
    follow = details.get("follow_every_seconds")
    if follow:
        return health.Cadence(timedelta(seconds=float(follow)), "FOLLOW_EVERY",
                              timedelta(seconds=float(details.get("every_seconds") or 0)))
    every = details.get("every_seconds")
    return health.Cadence(timedelta(seconds=float(every)) if every else load_every)


def _held_ahead(settings: ResolvedSettings, table: TableSpec, conn: psycopg.Connection,
                source: SourceRelation, now: datetime, far: datetime | None) -> tuple[int, int]:
    """Of the source's rows dated after ``now``, and of those after ``far`` (None: none), how many the
    lake holds: a load read them with the rest of their transaction
    (:func:`pipeline.load.plan.whole_transactions`), so they wait for nothing. One lake session."""
    with lake_session(settings, read_only=True) as opened:
        lake = opened.table_of(table)
        kind = proof.key_shape(conn, lake, source).kind

        def ids_after(instant: datetime) -> set[UUID]:
            ahead = stats.future_rows(conn, source, instant, id_kind=kind, limit=PULL_LIMIT + 1)
            return {i for ids in ahead.values() for i in ids}

        # held dated ahead as the source dates them: a row the lake holds at the time it was loaded
        # at, which the source then moved into the future, waits (a repair took the old one out)
        held = batch_table.held_ids(lake, ids_after(now), kind=kind, after=now)
        return len(held), len(held & ids_after(far)) if far is not None else 0


def _identity(conn: psycopg.Connection, settings: ResolvedSettings, table: TableSpec, source: SourceRelation,
              watermark: datetime, now: datetime) -> proof.RangeCheck:
    """The lake against the source over the look-back behind the watermark (and after ``now`` −
    SOURCE_RETENTION, ``now`` the source's clock), by id and content. Ids the lake
    lacks there are rows the next load reads (late arrivals); rows the source deleted, moved or
    changed after loading are a divergence no load repairs."""
    # the lake's reads in one snapshot of it: the last batch's mark is the one of the rows it counted
    with lake_session(settings, read_only=True) as opened, one_read(opened):
        lake = opened.table_of(table)
        # the watermark as this read sees it: a load that committed since status read the lake moved
        # it, and the rows it committed, dated after the older one, were compared as rows read ahead
        # of the source's clock, id by id — during a history's load, a part's million ids looked up in
        # the source (a --status of 10.6 s where it takes 1.3)
        watermark = batch_table.watermark(lake) or watermark
        how = proof.key_shape(conn, lake, source)
        low = complete_after(watermark - settings.lookback, now, settings.source_retention)
        check = proof.compare(conn, lake, source, low, watermark, how,
                              content=proof.row_hash(lake, source, how), ahead_of=watermark)
        earlier = batch_table.last_arrivals(lake) if check.missing else None
    # extras a load took since: not deleted
    check = proof.newer_than_snapshot(settings.source_dsn, source, check, how)
    if earlier is None or earlier[2] is None:
        return check
    # ids the last load's snapshot held (written by older transactions) are no late arrivals: it
    # should have loaded them, and did not
    missed = stats.written_before(conn, source, set(check.missing), earlier[2],
                                  id_kind=how.kind)
    return replace(check, missed=sorted(missed))


def _misshaped(conn: psycopg.Connection, settings: ResolvedSettings, source: SourceRelation) -> str | None:
    """Why the table cannot be read as named (a missing or retyped id or time column), or None."""
    try:
        check_shape(conn, source, settings.schema_changes_of(source.qualified), settings.arrival_column)
    except PipelineError as exc:
        return f"{first_line(exc)} {exc.hint}"
    return None


def _denied(conn: psycopg.Connection, table: str) -> str | None:
    """Why the source role may not read ``table`` (with the GRANT), or None when it may."""
    try:
        stats.require_select(conn, table)
    except SourceAccessDenied as exc:
        return f"{first_line(exc)} {exc.hint}"
    return None


def collect(settings: ResolvedSettings) -> Status:
    """Read where the pipeline stands: the lake (read-only, once for every table), the source,
    staging, the scheduler's state; each table's status (SOURCE_TABLE's one table is an image of
    one), and the whole folded from them: the worst health with every reason, and sums."""
    wide, facts = read_lake(settings)
    return _fold({table.name: _collect(settings, table, wide, facts[table.name])
                  for table in settings.tables})


def _fold(each: dict[str, Status]) -> Status:
    """The image's status from each table's: no table speaks for the others (what is the lake's —
    catalog, files, snapshots, jobs — each holds alike, read once: :func:`read_lake`)."""
    worst = max(each.values(), key=lambda status: status.health.code)
    reasons = [f"{name}: {reason}" for name, status in each.items() for reason in status.health.reasons]
    lake_wide = next(iter(each.values()))
    errors = [f"{name}: {status.source_error}" for name, status in each.items() if status.source_error]
    future = [s.source_rows_in_future for s in each.values() if s.source_rows_in_future is not None]
    return replace(lake_wide, health=replace(worst.health, reasons=reasons),
                   source_error="; ".join(errors) or None,
                   source_newest_event=max((s.source_newest_event for s in each.values()
                                            if s.source_newest_event is not None), default=None),
                   source_rows_in_future=sum(future) if future else None,
                   arrivals=_arrivals_of(each),
                   set_aside_batches=[batch for s in each.values() for batch in s.set_aside_batches],
                   tables={name: status.part() for name, status in each.items()},
                   history=History.combined([s.history for s in each.values() if s.history is not None]),
                   payload=PayloadStatus.combined([s.payload for s in each.values()]),
                   divergences=[d for s in each.values() for d in s.divergences],
                   schema_changes=[c for s in each.values() for c in s.schema_changes],
                   watermark=image_watermark((s.watermark, s.catching_up) for s in each.values()),
                   identity=_weakest([s.identity for s in each.values() if s.identity is not None]),
                   catching_up=any(s.catching_up for s in each.values()),
                   lake_rows_not_in_source=sum(s.lake_rows_not_in_source for s in each.values()),
                   lake_rows_changed_in_source=sum(s.lake_rows_changed_in_source for s in each.values()),
                   lake=", ".join(status.lake for status in each.values()),
                   lake_rows=sum(status.lake_rows for status in each.values()),
                   source_rows_after_watermark=None if any(s.source_rows_after_watermark is None
                                                           for s in each.values())
                   else sum(s.source_rows_after_watermark or 0 for s in each.values()),
                   lag_seconds=max((s.lag_seconds for s in each.values() if s.lag_seconds is not None),
                                   default=None),
                   rows_quarantined=sum(status.rows_quarantined for status in each.values()),
                   staged_batches_waiting=sum(status.staged_batches_waiting for status in each.values()),
                   last_hour=batch_table.combined(hours) if (hours := [s.last_hour for s in each.values()
                                                                       if s.last_hour]) else None,
                   last_batches=sorted((b for s in each.values() for b in s.last_batches),
                                       key=lambda b: str(b.get("promoted_at")), reverse=True)[:5])


def _weakest(checks: list[proof.RangeCheck]) -> proof.RangeCheck | None:
    """The image's identity check: the table's that differs most, else the one proven through the
    earliest instant (the image is proven through it); each table's own is in ``tables``."""
    return min(checks, key=lambda check: (check.exact, -(len(check.missing) + len(check.extra)
                                                         + len(check.moved) + len(check.changed)),
                                          check.upper), default=None)


def _arrivals_of(each: dict[str, Status]) -> ArrivalFacts:
    """The arrival facts of every table: the column, set by the database only if it is in every table
    that has it, the rows found behind the mark summed, each table's note named."""
    facts = [status.arrivals for status in each.values()]
    columns = [fact for fact in facts if fact.column]
    stamped = [fact.set_by_database for fact in columns]
    notes = [f"{name}: {status.arrivals.note}" for name, status in each.items() if status.arrivals.note]
    return ArrivalFacts(columns[0].column if columns else None,
                        None if not stamped or None in stamped else all(stamped),
                        sum(fact.rows_behind_mark_last_hour for fact in facts), "; ".join(notes) or None)


def _collect(settings: ResolvedSettings, table: TableSpec, wide: LakeFacts, facts: TableFacts) -> Status:
    """``table``'s status, from what the lake holds (``wide``: the lake's, ``facts``: the table's)
    and its source."""
    watermark, batches, job_runs = facts.watermark, facts.batches, wide.job_runs
    newest, pending, future, far_future, now, source_error = None, None, None, 0, datetime.now(UTC), None
    surplus, changed, identity = 0, 0, None
    column = settings.arrival_column
    stamped: bool | None = True
    try:
        with connect_source(settings.source_dsn) as conn:
            exists = stats.table_exists(conn, table.qualified)
            pending, future, now = 0, 0, stats.server_now(conn)
            if not exists:
                source_error = (f"the table {table.qualified} does not exist in {settings.source_dsn} "
                                "(the generator creates it; or set "
                                "SOURCE_TABLES or SOURCE_TABLE)")
            elif denied := _denied(conn, table.qualified):  # no SELECT: said, with the GRANT
                source_error, exists = denied, False
            else:  # the table as every stage reads it; a misnamed or retyped column: said, with the fix
                source = SourceRelation.of(conn, table)
                if misread := _misshaped(conn, settings, source):
                    source_error, exists = misread, False
            if exists:
                relation = source.sql
                future = stats.rows_after(conn, source, now)
                # ahead by more than the tolerance and at most a time zone's offset: naive times
                # written in another zone, most likely; further ahead, a date no zone explains
                # (2099, a row moved days ahead): future-dated, loaded when due, no reason for STALE
                tolerated = now + health.FUTURE_TOLERANCE
                far_future = (stats.rows_after(conn, source, tolerated)
                              - stats.rows_after(conn, source, tolerated + health.ZONE_SPAN)) if future else 0
                if future and watermark is not None:  # those a load read with their transaction wait not
                    held, held_far = _held_ahead(settings, table, conn, source, now,
                                                 now + health.FUTURE_TOLERANCE if far_future else None)
                    future, far_future = future - held, max(0, far_future - held_far)
                # bounded by the event_timestamp index: the newest loadable row (future-dated rows
                # wait, so they are no lag), and the rows past the watermark
                newest = one_row(conn.execute(f"SELECT max(event_timestamp)::timestamptz FROM {relation} "
                                              f"WHERE event_timestamp <= %(now)s AND {FINITE_FLOOR}",
                                              {"now": now}))[0]
                pending = one_row(conn.execute(f"SELECT count(*) FROM {relation} WHERE %(wm)s::timestamptz "
                                               "IS NULL OR event_timestamp > %(wm)s", {"wm": watermark}))[0]
                damaged = wide.integrity is not None and wide.integrity.problems
                if watermark is not None and not damaged:  # the look-back, id by id (a damaged file
                    # fails every read of the ids, and is the finding already)
                    try:
                        identity = _identity(conn, settings, table, source, watermark, now)
                        surplus, changed = identity.diverged, len(identity.changed)
                    except TerminalError as exc:  # a key retyped after loading: said, as a load says it
                        source_error = f"{first_line(exc)} {exc.hint}"
                # a table without the arrival column is read by its window (pipeline.source.shape)
                if column not in source.types:
                    column = None
                if column:
                    stamped = arrivals.stamped_by_database(conn, table.qualified, column)
    except SourceUnavailable as exc:
        # the lake is still readable: report what it holds, and the source as down (failing)
        source_error = first_line(exc)
    lag = (newest - watermark).total_seconds() if newest and watermark else None
    staged = staging.table_dir(settings, table)
    set_aside = staging.failed_batches(staged)
    last_load = next((r for r in job_runs if r["job"] == "load"), None)
    promoted = [b["promoted_at"] for b in batches if b.get("promoted_at")]
    successes = [t for t in (facts.last_load_success, *promoted) if isinstance(t, datetime)]
    # rows the source holds: counted when nothing is loaded yet (all of them are after no watermark)
    holds = (pending or 0) if watermark is None and pending else 1 if newest else 0
    shown = ", ".join(identity.id_kind.key_of(i) for i in identity.missed[:3]) if identity is not None else ""
    missed = ([f"{len(identity.missed)} source id(s) in the look-back that the last load's snapshot held "
               f"are not in the lake (e.g. {shown}): run a load; if they "
               f"stay missing, {actions.VERIFY} {actions.SINCE} <range> names them"]
              if identity is not None and identity.missed else [])
    cadence = _cadence(settings.intervals.load, last_load)
    judged = health.assess(now, cadence, max(successes) if successes else None,
                           last_load["status"] if last_load else None,
                           last_load["error"] if last_load else None, len(set_aside), holds,
                           far_future=far_future, source_error=source_error, lake_surplus=surplus,
                           lake_changed=changed,
                           lake_damage=[*(wide.integrity.problems if wide.integrity else []),
                                        *missed, *_interrupted(wide.erasures_interrupted),
                                        *_unrepaired(facts.divergences, watermark, now)])
    behind = facts.last_hour["rows_behind_mark"] if facts.last_hour else 0
    return Status(
        health=judged, lake=settings.lake_table(table), lake_exists=wide.exists,
        catalog=settings.catalog.describe(), data_path=settings.data_path, watermark=watermark,
        source_error=source_error, source_newest_event=newest, lag_seconds=lag,
        source_rows_after_watermark=pending, source_rows_in_future=future, rows_quarantined=facts.quarantined,
        arrivals=ArrivalFacts(column, stamped, behind, arrivals.arrival_note(column, stamped, behind))
        if column else ArrivalFacts(rows_behind_mark_last_hour=behind),
        lake_rows_not_in_source=surplus, lake_rows_changed_in_source=changed, identity=identity,
        lake_rows=facts.lake_rows,
        snapshot_count=wide.snapshots, latest_snapshot=wide.latest, data_files=wide.files,
        data_bytes=wide.size, integrity=wide.integrity,
        staged_batches_waiting=len(staging.complete_batches(staged, wide.lake_id))
        if wide.lake_id else 0,
        set_aside_batches=set_aside,
        jobs={r["job"]: {"status": r["status"], "started_at": iso(r["started_at"]),
                         "finished_at": iso(r["finished_at"]), "error": r["error"]} for r in job_runs},
        scheduler=SchedulerStates(settings.home).read(), last_batches=batches, last_hour=facts.last_hour,
        catching_up=facts.catching_up, payload=facts.payload, divergences=facts.divergences,
        schema_changes=facts.schema_changes,
        history=History.of(facts.lake_rows, pending, facts.history_rate)
        if facts.catching_up or (watermark is None and wide.exists) else None)
