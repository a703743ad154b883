"""One pipeline run: promote leftovers, plan the window, extract a batch, promote it.

A run attaches the lake once and reads the watermark once; everything it promotes goes
through that one session, and the watermark it reports is the one its commits produced.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import TYPE_CHECKING

import duckdb
import psycopg

from pipeline import actions, logs, process, staging
from pipeline.errors import (
    ConfigError,
    PipelineError,
    first_line,
    is_transient,
)
from pipeline.extract.batch import Extractor, ExtractRequest, extract
from pipeline.extract.engines import make_extractor
from pipeline.id_checksum import IdSum
from pipeline.lake import batches, divergences, jobs, type_views
from pipeline.lake.connect import lake_session
from pipeline.lake.identity import lake_id, table_names
from pipeline.lake.maintain import unmerged_files
from pipeline.lake.schema import column_types, ensure_tables
from pipeline.lake.session import Lake, LakeTable
from pipeline.lake.transaction import one_read
from pipeline.load import proof
from pipeline.load.ahead import PartAhead
from pipeline.load.image_plan import plan_image
from pipeline.load.payload_typing import chosen_keys, keys_of_new_table, type_payload_keys, types_of_new_table
from pipeline.load.plan import whole_transactions
from pipeline.load.preflight import preflight, refuse_tearing_an_image
from pipeline.load.report import HistoryPart, RunReport, TableRun
from pipeline.promote import zero_copy
from pipeline.promote.group import promote_staged_group, promotion_outage
from pipeline.promote.promotion import PromotionResult
from pipeline.settings import ResolvedSettings, TableSpec
from pipeline.settings.model import Engine
from pipeline.source import shape
from pipeline.source.connect import connect
from pipeline.source.give_way import GaveWay
from pipeline.source.plan import BatchPlan
from pipeline.source.snapshot import PlannerSnapshot, TablesBusy, exported_snapshot
from pipeline.staging import StagedBatch
from pipeline.storage.outage import store_outage

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from pipeline.storage.folder import Folder

log = logging.getLogger(__name__)


class RunMode(StrEnum):
    """What one load does: both halves (``run``), or one of them (``--extract-only``,
    ``--promote-only``: staged batches are the hand-over)."""

    RUN = "run"
    EXTRACT = "extract"  # stage a batch, promote nothing
    PROMOTE = "promote"  # promote what is staged, extract nothing

    @property
    def extracts(self) -> bool:
        return self is not RunMode.PROMOTE

    @property
    def promotes(self) -> bool:
        return self is not RunMode.EXTRACT


def run_mode(mode: RunMode | str) -> RunMode:
    """``mode`` as a :class:`RunMode` (a notebook may give its name); another name is a ConfigError."""
    try:
        return RunMode(mode)
    except ValueError:
        modes = ", ".join(m.value for m in RunMode)
        raise ConfigError(f"No run mode {mode!r}.", f"Give one of {modes}.") from None


@dataclass(frozen=True)
class Readiness:
    """What a load checks that then holds for a process's life: the source table is there, the data
    and staging folders take writes, the lake's tables exist and its data folder is this lake's, the
    lake holds this source's events, stale staging is cleaned and leftover batches are promoted. A
    process that loads again keeps it and skips those checks; a failed load drops it, so the next
    load checks everything again."""

    lake_identity: str


class Loader:
    """Loads with one extraction engine into the lake the settings name: one :meth:`load` at a time."""

    def __init__(self, settings: ResolvedSettings, engines: Engines) -> None:
        self.settings, self.engines = settings, engines

    def load(self, mode: RunMode = RunMode.RUN, *, ready: Readiness | None = None,
             record_as: str | None = None, count_unmerged: bool = True) -> tuple[RunReport, Readiness | None]:
        """One load: with ``ready`` (an earlier load's), only its own work — the watermark, the plan,
        extraction and promotion; without, every check first. Returns the report and the readiness
        the next load may keep (None after a batch was set aside)."""
        settings = self.settings
        report = RunReport()
        started = time.monotonic()
        if ready is None:
            began = datetime.now(UTC)
            try:
                preflight(settings, reads_source=mode.extracts)
            except PipelineError as exc:  # recorded too: --status says the last load failed, and why
                if record_as:
                    jobs.JobHistory(settings).record_failure(record_as, began, first_line(exc))
                raise
        try:
            ready = self._in_session(mode, ready, record_as, report, started,
                                     count_unmerged and bool(settings.intervals.compact_files))
        except PipelineError as exc:  # what the load did before it failed goes with the error
            exc.during(str(mode), report)
            raise
        except duckdb.Error as exc:
            if not is_transient(exc):
                raise
            # the catalog (or the object store) went away under the run: named, temporary (was the raw
            # "TransactionContext Error: Failed to commit…" or "Failed to get global stats information…")
            raise promotion_outage(settings, exc).during(str(mode), report) from None
        # a batch set aside is a failure too (a lake table dropped by hand fails every promotion): the
        # next load checks everything, and says what is wrong instead of setting aside one batch a tick
        return report, None if report.set_aside else ready

    def _in_session(self, mode: RunMode, ready: Readiness | None, record_as: str | None, report: RunReport,
                    started: float, count_unmerged: bool) -> Readiness:
        """:meth:`load`'s work in one lake session, shared with its job record (the record falls back
        to a session of its own if the run's failed); the readiness it checked or was given."""
        settings, engines = self.settings, self.engines
        checking = ready is None
        with lake_session(settings) as lake, \
                jobs.JobHistory(settings).recorded(record_as, lake) as details, \
                contextlib.closing(_ImageLoad(settings, lake, report)) as image:
            if ready is None:
                if mode.extracts and mode.promotes:
                    image.plan_first_part_ahead()
                image.check(extracts=mode.extracts)
                ready = Readiness(lake_id(lake))
            if mode.promotes and checking:  # a load's own batches are promoted as it goes
                image.promote_leftovers(ready.lake_identity)
            if mode.extracts:
                # the watermarks are read with the plan's other lake reads, in one lake transaction
                # (after leftovers: their commits move them); a history goes on part after part, each
                # in a snapshot of its own, until read (or a part fails, or a stop was asked for: the next
                # load resumes after the last committed part)
                image.load(ready.lake_identity, engines, promote_now=mode.promotes)
                while (mode.promotes and image.reading_history() and not (report.set_aside or report.lacking)
                       and process.stop_signal() is None):
                    image.load(ready.lake_identity, engines, promote_now=True)
            else:
                image.read_watermarks()
            if report.rows_inserted and count_unmerged:  # in this session: no attach of its own
                report.files_to_merge = unmerged_files(lake, [load.lake.name for load in image.loads])
            report.seconds["total"] = time.monotonic() - started
            details.update(rows_inserted=report.rows_inserted, summary=report.summary(),
                           tables=[load.lake.name for load in image.loads])
            if report.set_aside:  # the command exits 1: the record says failed too
                details.fail(f"batch(es) set aside: {', '.join(report.set_aside)}")
            elif report.lacking:  # so does this
                details.fail(f"the lake lacks {report.lacking_words()} read in this load")
        return ready


def refuse_another_source(table: LakeTable, source_name: str) -> None:
    """A lake table holds one source's events, under one watermark: a second source whose table
    has the same name (tenant_b.events after tenant_a.events) would be read from the first one's
    watermark on and lose everything older, so it is refused before anything is read."""
    bound = batches.bound_source(table)
    if bound is None or bound == source_name:
        return
    raise ConfigError(
        f"Lake table {table.events_table} holds the events of {bound}; SOURCE_TABLE "
        f"{source_name} is another source and would share its watermark (its older rows "
        "would never load). Nothing was read.",
        f"Give this source a lake of its own (another DUCKLAKE_NAME). If {source_name} is the "
        f"same table under a new name, record that with {actions.WRITE} {actions.SQL} \"UPDATE "
        f"ops.batches SET source = '{source_name}' WHERE table_name = '{table.name}'\".")


@dataclass(frozen=True)
class Engines:
    """The extraction engine by name, and the caller's Spark session (or how to make one)."""

    name: Engine
    spark: SparkSession | None
    factory: Callable[[], SparkSession] | None

    def session(self) -> SparkSession | None:
        """The Spark session to extract with (None: the engine makes its own, or needs none)."""
        if self.spark is None and self.factory is not None and self.name is Engine.SPARK:
            return self.factory()
        return self.spark


def _snapshot_ids(snapshot: PlannerSnapshot, plan: BatchPlan) -> IdSum:
    """The ids the planner's snapshot holds dated in the plan's window's range."""
    return proof.source_ids(snapshot.conn, plan.source, plan.window.low, plan.window.upper, plan.ids)


@dataclass
class _TableLoad:
    """One table's part of an image load: the table, its lake table, its report, where its first
    plan started."""

    settings: ResolvedSettings  # the image's
    table: TableSpec
    lake: LakeTable
    report: TableRun  # the load's own report when the image is one SOURCE_TABLE
    planned_from: datetime | None = None  # the watermark the load's first plan started after
    # the ids its last extraction read in its window's range, for a plan whose readers sum them
    # (BatchPlan.ids_read): the plan's source side, known once the batch is staged
    read_ids: IdSum | None = None

    @property
    def staged(self) -> Folder:
        """Where the table's batches are staged."""
        return staging.table_dir(self.settings, self.table)

    def clean_staging(self) -> None:
        try:
            for path in staging.clean_stale(self.staged):
                log.info("removed stale incomplete batch %s", path.uri())
            self.remove_abandoned()
        except OSError as exc:  # the first touch of an object-store staging area
            raise store_outage(self.settings, exc) or exc from None

    def remove_abandoned(self) -> None:
        """The partial files of extractions whose process died on this host (Spark's _temporary
        parts, zero-copy files not yet settled): a batch never gets a manifest after its process is
        gone, so they go now rather than in an hour."""
        table_dir = self.staged
        incoming = self.lake.table_folder.child(zero_copy.INCOMING)
        for batch_id in staging.abandoned_batches(table_dir):
            folder = staging.batch_dir(table_dir, batch_id)
            if not staging.is_complete(folder):
                staging.remove_batch(folder)
            incoming.child(batch_id).remove()
            incoming.delete(f"{batch_id}{zero_copy.LAKE_IDS_SUFFIX}")
            staging.release_batch(table_dir, batch_id)
            log.info("removed the leftovers of batch %s, whose extraction died with its process", batch_id)

    def extract(self, lake_identity: str, extractor: Extractor, snapshot: PlannerSnapshot,
                plan: BatchPlan, group: tuple[str, dict[str, str]]) -> StagedBatch:
        """Stage the plan's rows as a batch with ``extractor`` (the load's, made once), read in the
        planner's snapshot (``group``: a SOURCE_TABLES plan's name and batch ids, this table's
        among them, claimed by the image)."""
        settings, report = self.settings, self.report
        log.info("extracting %d rows in window %s with %s", plan.stats.rows, plan.window.describe(),
                 extractor.engine)
        t0 = time.monotonic()
        batch_id = group[1][self.lake.name]
        # claimed before its first file (the lake ids zero-copy writes into the data path): a kill
        # from here on leaves a record the next run cleans up after, not an hour later
        try:
            staging.claim_batch(self.staged, batch_id)
        except OSError as exc:  # an object store that went away: named, temporary (was "unexpected")
            raise store_outage(settings, exc) or exc from None
        try:
            choice = zero_copy.choose(settings, self.lake, snapshot.conn, extractor.engine, plan, batch_id)
        except BaseException:
            staging.release_batch(self.staged, batch_id)
            raise
        request = ExtractRequest(settings, self.table, plan, batch_id, lake_identity, promotion=choice,
                                 group=group, source_ids=lambda: _snapshot_ids(snapshot, plan))
        self.read_ids = None
        batch = extract(extractor, request)
        if plan.ids_read and batch.manifest.source_ids is not None and batch.manifest.source_id_checksum:
            self.read_ids = IdSum.recorded(batch.manifest.source_ids, batch.manifest.source_id_checksum)
        took = time.monotonic() - t0
        report.seconds["extract"] = report.seconds.get("extract", 0.0) + took
        report.staged_batch, report.rows_in_window = batch.batch_id, batch.manifest.row_count
        log.info("staged batch %s: %d rows in %d file(s)%s (%.2fs)", batch.batch_id,
                 batch.manifest.row_count, len(batch.manifest.files),
                 f" + {len(batch.lake_files)} lake file(s) to register" if batch.lake_files else "", took)
        return batch

    def held_as_planned(self, plan: BatchPlan) -> bool:
        """A plan that read nothing: does the lake hold every id of the range as the plan read it
        (in the same snapshots)? Then that is the identity check, recorded, and no second lake read
        is needed (an idle tick)."""
        if plan.lake_ids is None or plan.lake_ids != plan.source_ids:
            return False
        self.report.check = proof.RangeCheck(plan.window.low, plan.window.upper, plan.source_ids,
                                             plan.lake_ids)
        self._kept(self.report.check)
        return True

    def check_identity(self, snapshot: PlannerSnapshot, plan: BatchPlan, inserted: int = 0,
                       duplicates: int = 0) -> int:
        """Compare the lake with the planner's snapshot over the window's range, by id — and by
        content when the batch held rows the lake had already (``duplicates``: a reach-back or the
        look-back re-read them; one the source changed since is a divergence, never dropped
        unsaid); return how many ids the lake lacks. Lake rows the source no longer has there are
        reported (they were deleted or moved in the source after loading), never hidden and never
        deleted, and kept (:mod:`pipeline.lake.divergences`) until a repair clears them."""
        source = plan.source_ids
        if plan.ids_read:  # summed by the readers, recorded with the batch (else the snapshot's, now)
            source = self.read_ids or _snapshot_ids(snapshot, plan)
        if source is None:
            return 0
        ids = plan.ids
        if plan.lake_was_empty and ids.kind.one_spelling and ids.unique and inserted == source.count:
            # a first load: every id it inserted is one of the snapshot's in the range (read from it,
            # deduplicated), and it inserted as many as the snapshot holds there, so it inserted
            # them all — a subset of equal size is the set. No scan of what was just written.
            self.report.check = proof.RangeCheck(plan.window.low, plan.window.upper, source, source)
            self._kept(self.report.check)
            return 0
        t0 = time.monotonic()
        with one_read(self.lake.lake):
            content = proof.row_hash(self.lake, plan.source, plan.ids) if duplicates else None
            check = proof.compare(snapshot.conn, self.lake, plan.source, plan.window.low,
                                  plan.window.upper, plan.ids, source=source, ahead_of=plan.window.upper,
                                  content=content)
        check = proof.newer_than_snapshot(self.settings.source_dsn, plan.source, check, plan.ids)
        self.report.seconds["check"] = self.report.seconds.get("check", 0.0) + time.monotonic() - t0
        self.report.check = check
        if check.extra or check.changed:
            log.warning("%s. The source deleted, moved or changed them after they were loaded; the lake "
                        "keeps what it loaded (%s names every row that differs)", check.describe(),
                        actions.VERIFY)
        elif check.missing:
            log.info("%s: reading the whole look-back for them", check.describe())
        self._kept(check)
        return len(check.missing)

    def _kept(self, check: proof.RangeCheck) -> None:
        """What the check saw differ that no load repairs (rows deleted, moved or changed after
        loading), kept for --status until a repair clears it; an exact check clears what was kept
        inside its range (proven gone)."""
        if check.exact:
            divergences.clear(self.lake, check.low, check.upper, "a load's identity check")
        elif check.extra or check.moved or check.changed:
            shown = [check.id_kind.key_of(i) for i in [*check.extra, *check.moved, *check.changed][:10]]
            # kept up to the watermark: a repair compares up to it (rows the lake holds past it, read
            # ahead with their transaction, every check compares wherever they are)
            mark = batches.watermark(self.lake)
            upper = min(check.upper, mark) if mark is not None else check.upper
            divergences.record(self.lake, check.low, upper, extra=len(check.extra),
                               moved=len(check.moved), changed=len(check.changed),
                               example_ids=[str(i) for i in shown], seen_by="load's identity check")


def make_own_tables(loads: list[_TableLoad]) -> None:
    """The lake tables of tables with their own id and time columns, made from their source's
    columns, all at once (:func:`pipeline.lake.schema.ensure_tables`)."""
    own = [load for load in loads if load.table.names_own_columns]
    if not own:
        return
    with connect(own[0].settings.source_dsn) as conn:
        for load in own:
            source = shape.SourceRelation.of(conn, load.table)
            extra = shape.check_shape(conn, source, load.settings.schema_changes_of(load.table.qualified))
            ensure_tables(load.lake, column_types(load.settings.promotion, load.settings.spark.reader),
                          own_columns=shape.own_table_columns(source, extra),
                          typed=functools.partial(chosen_keys, load.settings, conn, load.table))


class _ImageLoad:
    """One load of the image: every table the settings list (SOURCE_TABLES; SOURCE_TABLE is an image
    of one) planned under one exported snapshot (one instant: the planner transaction's ``now()``),
    extracted table by table with one engine, and committed in one lake transaction: each lake
    snapshot is one image of the source across the tables, its batches a group (each names it;
    SOURCE_TABLE's one table is an image of one), each table with its part of the report."""

    def __init__(self, settings: ResolvedSettings, lake: Lake, report: RunReport) -> None:
        self.settings, self.lake, self.report = settings, lake, report
        self.loads = [_TableLoad(settings, spec, table, TableRun())
                      for spec, table in lake.tables(settings.tables).items()]
        report.tables = {load.lake.name: load.report for load in self.loads}
        # a history read in parts: the bound of this image's part (None: no table reads one), whether
        # it moved past the last part's, and the tables' rows as pg_class estimates them
        self.history_bound: datetime | None = None
        self.history_moved = False
        self.history_rows = 0
        self._made: Extractor | None = None  # the extractor, once the first extraction made it
        self._ahead: PartAhead | None = None  # the next part's snapshot, its walk made meanwhile

    def close(self) -> None:
        """End what this load opened ahead and did not use (a stop, a failure, the last part)."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            ahead.close()

    @contextlib.contextmanager
    def _planner_snapshot(self, *, ahead_ok: bool) -> Iterator[PlannerSnapshot]:
        """The image's planner snapshot: the one taken ahead while the last part committed, when there is
        one and ``ahead_ok``, else a fresh one. A second image of the same load (a short table's
        look-back read again) is not ``ahead_ok``, and drops the one taken ahead: no plan may take a
        snapshot older than the last image's."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            with ahead:
                taken = ahead.take() if ahead_ok else None
                if taken is not None:
                    yield taken
                    return
        with self._fresh_snapshot() as fresh:
            yield fresh

    def _fresh_snapshot(self, locked: Sequence[str] = ()
                        ) -> contextlib.AbstractContextManager[PlannerSnapshot]:
        return exported_snapshot(self.settings.source_dsn, arrivals=self.settings.arrival_column is not None,
                                 locked=locked, give_way=True)

    def _plan_ahead(self, plans: list[BatchPlan]) -> None:
        """A history goes on after this part, which is read: take the next part's snapshot now, and
        walk to its end in it while this part commits (each table reading one starts its next part at
        this part's bound). Its tables are locked first, at once or not at all: a statement holding or
        waiting for a stronger lock (an ALTER TABLE) leaves the next part to be planned after it."""
        self._start_ahead([(load.table, plan.window.upper, self.settings.backfill_rows)
                           for load, plan in zip(self.loads, plans, strict=True) if plan.backfill])

    def plan_first_part_ahead(self) -> None:
        """A first load of tables never loaded (their lake tables not made yet): the walk to the end
        of their first part is made while the lake's tables are made, in the snapshot their first
        plan then takes."""
        if not self.settings.backfill_rows:
            return
        made = table_names(self.lake)  # one read of the catalog for every table of the image
        if not any(("main", load.lake.name) in made for load in self.loads):
            self._start_ahead([(load.table, None, self.settings.backfill_rows) for load in self.loads])

    def _start_ahead(self, walks: list[tuple[TableSpec, datetime | None, int]]) -> None:
        if not walks or self._ahead is not None:
            return
        try:
            tables = [load.table.qualified for load in self.loads]
            self._ahead = PartAhead(self._fresh_snapshot(locked=tables), walks)
        except TablesBusy as busy:
            log.info("a statement holds or waits to change %s: the next part is planned after it", busy)
        except (PipelineError, psycopg.Error) as exc:  # the source gone, a table it cannot lock (a
            # foreign table, one dropped since): the next plan meets it, and says it, or plans alone
            log.debug("the next part is not planned ahead: %s", first_line(str(exc)))

    def check(self, extracts: bool) -> None:
        """What a load checks before its first plan: every table's lake table made, none loaded from
        another source nor torn from an image it belongs to, stale staging cleaned."""
        for load in self.loads:
            ensure_tables(load.lake, column_types(self.settings.promotion, self.settings.spark.reader),
                          typed=keys_of_new_table(self.settings, load.table) if extracts else None,
                          types=types_of_new_table(self.settings, load.table) if extracts else None)
        if extracts:
            make_own_tables(self.loads)
            type_payload_keys(self.settings, [(load.table, load.lake) for load in self.loads])
            for load in self.loads:  # a new event type, or a new key of one, gets its view's column: before
                type_views.refresh(load.lake)  # the load's commit, which stays the run's last snapshot
            for load in self.loads:
                refuse_another_source(load.lake, load.settings.source_name(load.table))
            refuse_tearing_an_image([load.lake for load in self.loads], self.settings.leave_image)
        for load in self.loads:
            load.clean_staging()

    def _advance(self, load: _TableLoad, result: PromotionResult | None, batch_id: str) -> None:
        """A promotion (None: its batch set aside) in its table's report and the load's."""
        if result is None:
            load.report.set_aside.append(batch_id)
        else:
            load.report.advance(result)
        self.report.advance(result, batch_id)

    def promote_leftovers(self, lake_identity: str) -> None:
        """Every table's leftover batches (a crash, --extract-only), each with its group, once, in one
        commit (a batch staged by a version that staged one table's batch alone: a group of one)."""
        for load in self.loads:
            for batch in staging.complete_batches(load.staged, lake_identity):
                if staging.is_complete(batch.folder):  # an earlier group of this pass took it
                    group = batch.manifest.group or batch.batch_id
                    members = batch.manifest.group_batches or {load.lake.name: batch.batch_id}
                    self._promote_group(group, members)

    def _promote_group(self, group: str, members: dict[str, str]) -> dict[str, PromotionResult]:
        """A group's batches promoted together, each result in its table's report and the load's."""
        results, set_aside = promote_staged_group(self.settings, self.lake, group, members)
        loads = {load.lake.name: load for load in self.loads}
        for table, result in results:
            if table in loads:
                self._advance(loads[table], result, result.batch_id)
            else:  # a table no longer listed: the load's report alone
                self.report.advance(result, result.batch_id)
        self.report.set_aside.extend(set_aside)
        return dict(results)

    def read_watermarks(self) -> None:
        for load in self.loads:
            load.report.watermark = batches.watermark(load.lake)

    def _extractor(self, engines: Engines, load: _TableLoad) -> Extractor:
        """The load's extractor, made by its first extraction (its engine's start counted there) and
        kept for every table and part after it: one engine start per load."""
        if self._made is None:
            t0 = time.monotonic()
            self._made = make_extractor(engines.name, self.settings, engines.session())
            load.report.seconds["engine_start"] = time.monotonic() - t0
        return self._made

    def reading_history(self) -> bool:
        """Does a table still read its history in parts, the last part having moved it on?"""
        return self.history_moved and any(load.report.catching_up for load in self.loads)

    def load(self, lake_identity: str, engines: Engines, *, promote_now: bool) -> None:
        """One image: plan, extract and promote every table; a table whose identity check came up
        short is read again with its whole look-back, in a second image of every table (an image of
        some tables only would pair them with the others' older instant)."""
        started, read, inserted = time.monotonic(), self._rows_read(), self.report.rows_inserted
        snapshots, engine = set(self.report.snapshots), self._engine_start()
        self._load(lake_identity, engines, promote_now)
        # a part of a history read in parts (not one read whole in a single image): said, and reported
        if self.history_bound is not None and promote_now and (self.report.parts or self.reading_history()):
            part = HistoryPart(self.history_bound, self._rows_read() - read,
                               self.report.rows_inserted - inserted,
                               [s for s in self.report.snapshots if s not in snapshots],
                               time.monotonic() - started, self._engine_start() - engine)
            self.report.parts.append(part)
            self._say_progress(part)

    def _rows_read(self) -> int:
        return sum(load.report.rows_read for load in self.loads)

    def _engine_start(self) -> float:
        return sum(load.report.seconds.get("engine_start", 0.0) for load in self.loads)

    def _say_progress(self, part: HistoryPart) -> None:
        """A line per committed part: its rows and rate, and how far the histories are."""
        loaded = sum(batches.rows_held(load.lake) for load in self.loads)
        rate, start = part.rate, part.engine_start_seconds
        reading = any(load.report.catching_up for load in self.loads)
        started = f" after the engine's {start:.1f}s start" if start else ""
        line = (f"{'reading history' if reading else 'history read'}: part {len(self.report.parts)} up to "
                f"{part.upper.isoformat()}: {part.rows_read:,} rows read in "
                f"{part.seconds - start:.1f}s{started} ({rate:,.0f} "
                f"rows/s), snapshot(s) {', '.join(map(str, part.snapshots)) or 'none'}; "
                f"{loaded:,} rows in the lake")
        if reading and self.history_rows > loaded and rate > 0:
            left = self.history_rows - loaded
            line += (f" of about {self.history_rows:,} ({100 * loaded / self.history_rows:.0f}%), "
                     f"about {left / rate:,.0f}s left")
        log.info(line, extra=logs.NOTABLE)  # a follower says it too

    def _load(self, lake_identity: str, engines: Engines, promote_now: bool) -> None:
        short = self._image(lake_identity, engines, promote_now, {})
        if short and (lacking := self._image(lake_identity, engines, True, short)):
            # read in this snapshot, whole, and still not in the lake: not a late arrival
            self.report.lacking = lacking
            log.error("after reading the whole look-back the lake still lacks %s that the source held "
                      "when it was read: rows lost on the way, not late (the next run reads them "
                      "again; %s names them)", self.report.lacking_words(), actions.STATUS)

    def _image(self, lake_identity: str, engines: Engines, promote_now: bool,
               rows_behind: dict[str, int]) -> dict[str, int]:
        """:meth:`_image_once`, again after each statement its snapshot gave way to (an ALTER TABLE
        waiting for the planner's locks: :mod:`pipeline.source.give_way`); its new plan waits for it."""
        while True:
            history = self.history_bound, self.history_moved
            try:
                return self._image_once(lake_identity, engines, promote_now, rows_behind)
            except GaveWay as gave:
                # the part was not read: where the histories stand is what it was (kept, the part planned
                # again with the same bound read as no progress, and the load stopped its history there)
                self.history_bound, self.history_moved = history
                log.info("planning the part again after the statement it gave way to (pid %d)",
                         gave.pid)

    def _image_once(self, lake_identity: str, engines: Engines, promote_now: bool,
                    rows_behind: dict[str, int]) -> dict[str, int]:
        """Plan every table in one planner snapshot, extract those with rows, promote them in one
        commit, then check each table by identity; the ids each table still lacks."""
        settings, t0 = self.settings, time.monotonic()
        # the planner's transaction stays open until the engine has read and the batch is checked:
        # its snapshot is shared, and it is what the lake is compared with
        with self._planner_snapshot(ahead_ok=not rows_behind) as snapshot:
            with one_read(self.lake):  # every table's lake reads in one lake snapshot too
                image = plan_image(settings, snapshot, [(load.table, load.lake) for load in self.loads],
                                   rows_behind, {load.lake.name: load.planned_from for load in self.loads})
                if not rows_behind:  # a first image
                    for load, (after, _) in zip(self.loads, image.starts, strict=True):
                        load.report.watermark, load.planned_from = image.marks[load.lake.name], after
                    self._history_part(image.plans, image.catching)
                for load, plan in zip(self.loads, image.plans, strict=True):
                    load.report.catching_up = plan.backfill
                plans = whole_transactions(snapshot, [load.lake for load in self.loads], image.plans)
            for load, plan in zip(self.loads, plans, strict=True):
                load.report.planned(plan)
            self.report.seconds["plan"] = self.report.seconds.get("plan", 0.0) + time.monotonic() - t0
            loading = [(load, plan) for load, plan in zip(self.loads, plans, strict=True) if plan.stats.rows]
            results = self._extract_and_promote(lake_identity, engines, snapshot, loading, promote_now,
                                                then=None if rows_behind else lambda: self._plan_ahead(plans))
            if not promote_now:
                return {}
            short = {}
            for load, plan in zip(self.loads, plans, strict=True):
                result = results.get(load.lake.name)
                if plan.stats.rows == 0:
                    log.info("no new events in window %s of %s", plan.window.describe(), load.lake.name)
                    if load.held_as_planned(plan):
                        continue
                elif result is None or not result.outcome.moves_the_watermark:
                    continue
                missing = load.check_identity(snapshot, plan, result.rows_inserted if result else 0,
                                              result.rows_duplicate if result else 0)
                if missing:
                    short[load.lake.name] = missing
            self.report.seconds["check"] = sum(load.report.seconds.get("check", 0.0) for load in self.loads)
            return short

    def _history_part(self, plans: list[BatchPlan], catching: dict[str, datetime | None]) -> None:
        """Note this image's part of the histories read in parts (none: no table reads one)."""
        reading = [(load, plan) for load, plan in zip(self.loads, plans, strict=True)
                   if load.lake.name in catching]
        if not reading:
            self.history_bound, self.history_moved = None, False
            return
        bound = max(plan.window.upper for _, plan in reading)
        self.history_moved = self.history_bound is None or bound > self.history_bound
        self.history_bound = bound
        self.history_rows = sum(plan.stats.table_rows for _, plan in reading)

    def _extract_and_promote(self, lake_identity: str, engines: Engines, snapshot: PlannerSnapshot,
                             loading: list[tuple[_TableLoad, BatchPlan]], promote_now: bool,
                             then: Callable[[], None] | None = None) -> dict[str, PromotionResult]:
        """Stage each table's rows, a group of batches, then promote them in one commit (calling
        ``then`` between: the next part planned ahead while this one commits)."""
        if not loading:
            return {}
        group = staging.new_batch_id()
        ids = {load.lake.name: staging.new_batch_id() for load, _ in loading}
        # a group is claimed in every table's folder until it is promoted: another process's leftover
        # pass leaves a group alone while any of its batches may still be written (a batch alone is
        # claimed by its extraction)
        claimed: list[tuple[_TableLoad, str]] = []
        try:
            for load, _ in loading:
                try:
                    staging.claim_batch(load.staged, group)
                except OSError as exc:
                    raise store_outage(self.settings, exc) or exc from None
                claimed.append((load, group))
            snapshot.give_way_while_read()  # its readers would queue behind a statement waiting on it
            staged = [(load, load.extract(lake_identity, self._extractor(engines, load), snapshot, plan,
                                          group=(group, ids)))
                      for load, plan in loading]
            snapshot.keep()  # staged: a statement coming now waits for the commit (GaveWay if one came)
            self.report.staged_batch = group
            self.report.rows_in_window = sum(batch.manifest.row_count for _, batch in staged)
            if not promote_now:
                return {}
            if then is not None:
                then()
            t0 = time.monotonic()
            results = self._promote_group(group, ids)
            self.report.seconds["promote"] = self.report.seconds.get("promote", 0.0) + time.monotonic() - t0
        finally:
            for step in ("engine_start", "extract"):  # each table's, in the whole's seconds
                self.report.seconds[step] = sum(load.report.seconds.get(step, 0.0) for load, _ in loading)
            for load, claim in claimed:
                with contextlib.suppress(OSError):
                    staging.release_batch(load.staged, claim)
        return results
