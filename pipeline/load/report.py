"""What a load did: each table's part (:class:`TableRun`), the image's whole (:class:`RunReport`,
folded from its tables: no table speaks for the others) and each committed part of a history
read in parts (:class:`HistoryPart`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from pipeline import actions
from pipeline.image import image_watermark
from pipeline.load import proof
from pipeline.promote.promotion import Outcome, PromotionResult
from pipeline.source.plan import BatchPlan
from pipeline.source.window import Window


@dataclass(frozen=True)
class HistoryPart:
    """One image of histories read in parts: every table read up to ``upper``, committed."""

    upper: datetime
    rows_read: int
    rows_inserted: int
    snapshots: list[int]
    seconds: float
    engine_start_seconds: float = 0.0  # of ``seconds``: the engine's start, which the first part waits for

    @property
    def rate(self) -> float:
        """Rows read a second, the engine's start left out: counted in, the first part's rate (and
        the ETA said with it) was the JVM's start as much as the part's read, 9.4 times too long."""
        reading = self.seconds - self.engine_start_seconds
        return self.rows_read / reading if reading > 0 else 0.0

    def as_dict(self) -> dict[str, object]:
        return {"upper": self.upper.isoformat(), "rows_read": self.rows_read,
                "rows_inserted": self.rows_inserted, "snapshots": self.snapshots,
                "seconds": round(self.seconds, 3),
                "engine_start_seconds": round(self.engine_start_seconds, 3)}


@dataclass
class Promoted:
    """Promotions and what they inserted: a table's (:class:`TableRun`) or the image's
    (:class:`RunReport`)."""

    promotions: list[PromotionResult] = field(default_factory=list)

    @property
    def rows_inserted(self) -> int:
        return sum(p.rows_inserted for p in self.promotions)

    @property
    def rows_quarantined(self) -> int:
        return sum(p.rows_quarantined for p in self.promotions)

    @property
    def snapshots(self) -> list[int]:
        """The snapshots committed, each once (a group's batches share one)."""
        return list(dict.fromkeys(p.snapshot_id for p in self.promotions if p.snapshot_id is not None))


@dataclass
class TableRun(Promoted):
    """What a load did to one table of the image (its part of :class:`RunReport`)."""

    window: Window | None = None
    rows_in_window: int = 0
    staged_batch: str | None = None
    watermark: datetime | None = None
    rows_in_future: int = 0  # dated after the source's clock: they wait until due
    set_aside: list[str] = field(default_factory=list)  # batches that could not be promoted
    rows_behind_mark: int = 0  # rows the completeness check found had arrived behind the last mark
    check: proof.RangeCheck | None = None  # the last identity check of the window's range, after promotion
    seconds: dict[str, float] = field(default_factory=dict)
    catching_up: bool = False  # this table reads its history in parts (BACKFILL_BATCH_ROWS)
    rows_read: int = 0  # rows the extractions read from the source (every pass, every part)

    def planned(self, plan: BatchPlan) -> None:
        """Record a plan: its window and what it counted there (and so its extraction reads)."""
        self.window, self.rows_in_window = plan.window, plan.stats.rows
        self.rows_in_future = plan.rows_in_future
        self.rows_behind_mark += plan.rows_behind
        self.rows_read += plan.stats.rows

    def advance(self, result: PromotionResult) -> None:
        """Record a promotion; a committed one may move the watermark."""
        self.promotions.append(result)
        if result.max_event_timestamp is not None and (
                self.watermark is None or result.max_event_timestamp > self.watermark):
            self.watermark = result.max_event_timestamp

    def as_dict(self) -> dict[str, object]:
        """The report as ``--run --json`` prints it (after ``"status"``)."""
        document: dict[str, object] = {
            "rows_read": self.rows_read, "rows_inserted": self.rows_inserted,
            "rows_quarantined": self.rows_quarantined,
            "rows_in_future": self.rows_in_future, "snapshots": self.snapshots,
            "staged_batch": self.staged_batch,
            "watermark": self.watermark.isoformat() if self.watermark else None,
            "set_aside": self.set_aside, "seconds": self.seconds}
        return document

    def summary(self) -> str:
        parts = []
        if self.staged_batch:
            parts.append(f"staged {self.rows_in_window} rows as batch {self.staged_batch}")
        elif self.window is not None:
            parts.append(f"no new events in window {self.window.describe()}")
        if self.promotions:
            committed = [p for p in self.promotions if p.outcome is Outcome.COMMITTED]
            parts.append(f"promoted {len(committed)} of {len(self.promotions)} batch(es), "
                         f"{self.rows_inserted} new rows"
                         + (f", {self.rows_quarantined} quarantined (see ops.quarantine)"
                            if self.rows_quarantined else "")
                         + (f", snapshot(s) {', '.join(map(str, self.snapshots))}"
                            if self.snapshots else ", no new snapshot"))
        if self.watermark:
            parts.append(f"watermark {self.watermark.isoformat()}")
        if self.catching_up:
            parts.append("its history is still being read in parts of BACKFILL_BATCH_ROWS rows (the next "
                         "load goes on after the last part committed)")
        if self.rows_behind_mark:
            parts.append(f"{self.rows_behind_mark} row(s) had arrived behind the last load's arrival mark "
                         "and were read with the whole look-back")
        if self.rows_in_future:
            parts.append(f"{self.rows_in_future} events dated in the future wait until due")
        if self.check is not None and (self.check.missing or self.check.extra or self.check.moved):
            parts.append(f"{self.check.describe()} (see {actions.STATUS})")
        if self.set_aside:
            parts.append(f"{len(self.set_aside)} batch(es) SET ASIDE, not loaded: "
                         f"{', '.join(self.set_aside)} (see the error above; then {actions.RETRY_FAILED})")
        return "; ".join(parts) or "nothing to do"


@dataclass
class RunReport(Promoted):
    """What a load did, for the last line of output and for tests: each table's part (``tables``,
    by lake table; SOURCE_TABLE's one table is an image of one) and the image's figures over them."""

    tables: dict[str, TableRun] = field(default_factory=dict)
    # (its promotions: every one, each table's and those of tables a leftover group held that are
    # no longer listed)
    staged_batch: str | None = None  # the group of batches the last extraction staged (one per table)
    rows_in_window: int = 0  # the rows that extraction staged, over every table
    set_aside: list[str] = field(default_factory=list)  # batches that could not be promoted
    seconds: dict[str, float] = field(default_factory=dict)
    files_to_merge: int = 0  # small data files waiting to be merged after this load (when it inserted)
    parts: list[HistoryPart] = field(default_factory=list)  # a history read in parts: each one committed
    # table -> source ids the lake still lacks after this load read its whole look-back again in
    # its own snapshot: ids it read and did not load (a defect, not a late arrival): the run fails
    lacking: dict[str, int] = field(default_factory=dict)

    @property
    def rows_read(self) -> int:
        return sum(table.rows_read for table in self.tables.values())

    @property
    def rows_in_future(self) -> int:
        return sum(table.rows_in_future for table in self.tables.values())

    @property
    def rows_behind_mark(self) -> int:
        return sum(table.rows_behind_mark for table in self.tables.values())

    @property
    def watermark(self) -> datetime | None:
        """The image's watermark, as ``--status`` says it: the oldest of the tables not catching up
        (else the oldest of any); each table's own is in ``tables``."""
        return image_watermark((t.watermark, t.catching_up) for t in self.tables.values())

    def advance(self, result: PromotionResult | None, batch_id: str) -> None:
        """A promotion in the image's figures (None: its batch set aside)."""
        if result is None:
            self.set_aside.append(batch_id)
        else:
            self.promotions.append(result)

    def as_dict(self) -> dict[str, object]:
        """The report as ``--run --json`` prints it (after ``"status"``)."""
        document: dict[str, object] = {
            "rows_read": self.rows_read, "rows_inserted": self.rows_inserted,
            "rows_quarantined": self.rows_quarantined,
            "rows_in_future": self.rows_in_future, "snapshots": self.snapshots,
            "staged_batch": self.staged_batch,
            "watermark": self.watermark.isoformat() if self.watermark else None,
            "set_aside": self.set_aside, "seconds": self.seconds,
            "tables": {name: table.as_dict() for name, table in self.tables.items()}}
        if self.parts:
            document["parts"] = [part.as_dict() for part in self.parts]
        if self.lacking:
            document["lacking"] = self.lacking
        return document

    def lacking_words(self) -> str:
        """Which tables the lake lacks ids of after the whole look-back was read (empty: none)."""
        return ", ".join(f"{count} id(s) of {table}" for table, count in self.lacking.items())

    def summary(self) -> str:
        """Each table's words, then the commits they shared."""
        snapshots = self.snapshots
        words = [f"{name}: {table.summary()}" for name, table in self.tables.items()]
        if set(self.set_aside) - {b for table in self.tables.values() for b in table.set_aside}:
            words.append(f"{len(self.set_aside)} batch(es) SET ASIDE, not loaded: "
                         f"{', '.join(self.set_aside)} (see the error above; then {actions.RETRY_FAILED})")
        words.append(f"one image committed as snapshot(s) {', '.join(map(str, snapshots))}"
                     if snapshots else "no new snapshot")
        return "; ".join(words)


