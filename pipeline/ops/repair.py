"""``--repair``: make the lake hold exactly the source's ids over a range again, in one snapshot.

The identity check (:mod:`pipeline.ops.proof`) reports rows the source deleted or moved (an
``UPDATE`` of ``event_timestamp``) after they were loaded; loads never change what the lake holds
(an id is loaded once). Repair is the one command that does: in one DuckLake transaction, under
the promote lock, it deletes the lake's rows of every id that differs and inserts those ids as
the source holds them now (validated as a load validates them), with a commit message saying how
many of each. Time travel keeps the state before: ``--at-version`` the snapshot before it.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import timedelta

from pipeline import id_checksum
from pipeline.lake import locks, validate
from pipeline.lake.attach_sql import SOURCE_ALIAS
from pipeline.lake.connect import lake_session
from pipeline.lake.schema import insert_columns_sql
from pipeline.lake.transaction import transaction
from pipeline.ops import proof
from pipeline.settings import ResolvedSettings
from pipeline.source.shape import STAGED_COLUMNS, IdShape, SourceRelation
from pipeline.source.snapshot import exported_snapshot
from pipeline.source.window import iso
from pipeline.sqltext import one_row, quote_ident, quote_literal

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RepairReport:
    check: proof.RangeCheck  # what differed before the repair
    rows_removed: int = 0
    rows_loaded: int = 0
    snapshot_id: int | None = None

    def as_dict(self) -> dict[str, object]:
        return {"before": self.check.as_dict(), "rows_removed": self.rows_removed,
                "rows_loaded": self.rows_loaded, "snapshot_id": self.snapshot_id}

    def summary(self) -> str:
        if self.check.exact:
            return f"nothing to repair: {self.check.describe()}"
        return (f"repaired {self.check.describe()}: removed {self.rows_removed} lake row(s), loaded "
                f"{self.rows_loaded} as the source holds them, in snapshot {self.snapshot_id} (the "
                f"snapshot before it keeps the old state)")


def repair(settings: ResolvedSettings, since: timedelta | None) -> RepairReport:
    """Compare over ``since`` before the watermark (None: everything up to it) and, where lake and
    source differ by id, replace the lake's rows of those ids with the source's, in one snapshot."""
    with locks.hold(settings, "promote"), lake_session(settings, source=True) as lake:
        con = lake.con
        with exported_snapshot(settings.source_dsn, arrivals=False) as snapshot:
            source = SourceRelation.of(snapshot.conn, settings)
            check = proof.prove_in(snapshot.conn, lake, source, since)
            how = IdShape.read(snapshot.conn, source)
        if check.exact:
            return RepairReport(check)
        ids = sorted({*check.missing, *check.extra, *check.moved})
        id_list = ", ".join(f"{quote_literal(str(i))}::UUID" for i in ids)
        columns = ", ".join(f"{expr} AS {name}" for name, expr in STAGED_COLUMNS.items())
        # as the source holds them now, up to the compared range's end: a row it moved into the
        # future is loaded when due, by a load, never ahead of the source's clock
        source_query = (f"SELECT {columns} FROM {source.sql} WHERE "
                        f"{id_checksum.postgres_id('event_id', how.uuid_typed)} IN "
                        f"({', '.join(quote_literal(str(i)) + '::uuid' for i in ids)}) "
                        f"AND event_timestamp <= {quote_literal(iso(check.upper))}::timestamptz")
        rows = validate.loadable_sql(True, f"postgres_query('{SOURCE_ALIAS}', {quote_literal(source_query)})")
        message = (f"repair {iso(check.low) if check.low else '-inf'} .. {iso(check.upper)}: the lake's rows "
                   f"of {len(ids)} id(s) replaced by the source's")
        info = json.dumps({"repair": check.as_dict()})
        with transaction(lake, message, info):
            own_id = quote_ident(lake.own("event_id"))
            removed = one_row(con.execute(f"DELETE FROM {lake.events_table} "
                                          f"WHERE TRY_CAST({own_id} AS UUID) IN ({id_list})"))[0]
            loaded = one_row(con.execute(insert_columns_sql(lake, f"({rows})")))[0]
        snapshot_id = one_row(con.execute(
            f"SELECT max(snapshot_id) FROM {settings.lake_name}.snapshots()"))[0]
    report = RepairReport(check, int(removed), int(loaded), snapshot_id)
    log.info("%s", report.summary())
    return report
