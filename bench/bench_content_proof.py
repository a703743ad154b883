"""What the content proof costs: the identity check by id alone, and by id and content, over
``--status``'s look-back and over the whole table (``--verify --since all``, ``--repair``).

    uv run --dev python bench/bench_content_proof.py --rows 200000 1000000

``--rows`` generated events (the generator's table and index) are loaded once with dlt; each
check then runs three times both ways in this process (the source's side in Postgres, the lake's
in DuckDB) and the table prints the median seconds and the ratio. Nothing differs: this is the
price of proving it.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import drop_databases, scratch_settings
from generators.writer import add_events
from pipeline.lake import batches
from pipeline.lake.connect import lake_session
from pipeline.load import proof
from pipeline.ops.pipeline import Pipeline
from pipeline.settings.resolve import resolve
from pipeline.source.connect import connect
from pipeline.source.shape import IdShape, SourceRelation


def _median(check, times: int = 3) -> float:
    seconds = []
    for _ in range(times):
        started = time.perf_counter()
        result = check()
        seconds.append(time.perf_counter() - started)
        assert result.exact, result.describe()
    return statistics.median(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[200_000])
    args = parser.parse_args()
    print(f"{'rows':>9} {'range':>10} {'rows in range':>14} {'by id s':>9} {'id+content s':>13} {'ratio':>6}")
    for rows in args.rows:
        with tempfile.TemporaryDirectory() as work:
            settings, names = scratch_settings(Path(work))
            try:
                resolved = resolve(settings)
                [table] = resolved.tables
                add_events(resolved.source_dsn, table.qualified, rows, seed=7)
                with Pipeline(resolved, engine="dlt") as pipeline:
                    pipeline.load()
                with connect(resolved.source_dsn) as conn, lake_session(resolved, read_only=True) as opened:
                    lake = opened.table_of(table)
                    source = SourceRelation.of(conn, table)
                    how = IdShape.read(conn, source)
                    content = proof.row_hash(lake, source, how)
                    upper = batches.watermark(lake)
                    assert upper is not None
                    for label, low in (("look-back", upper - resolved.lookback), ("all", None)):
                        inside = batches.id_sums(lake, low, upper).get(0)
                        check = partial(proof.compare, conn, lake, source, low, upper, how)
                        by_id, by_content = _median(check), _median(partial(check, content=content))
                        print(f"{rows:>9} {label:>10} {inside.count if inside else 0:>14} {by_id:>9.3f} "
                              f"{by_content:>13.3f} {by_content / by_id:>6.1f}")
            finally:
                drop_databases(names)


if __name__ == "__main__":
    main()
