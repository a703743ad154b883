"""A :class:`~pipeline.ops.pipeline.Pipeline` owns a pipeline's lifetime: a load after the first
(a ``--follow`` tick) does a load's own work only, and checks everything again after a failure."""

from __future__ import annotations

import duckdb
import psycopg
import pytest

from pipeline import staging
from pipeline.errors import PipelineError
from pipeline.lake.connect import lake_session
from pipeline.ops.pipeline import Pipeline
from pipeline.settings import load_settings
from pipeline.settings.pgdsn import PgDsn
from pipeline.settings.resolve import resolve
from tests.helpers import TcpProxy, add_events, assert_lake_equals_source, lake_query, staging_folder


@pytest.fixture
def source_proxy(lake_env):
    """The source reached through a proxy that counts the connections the pipeline opens."""
    source = PgDsn.parse(lake_env["SOURCE_PG_DSN"])
    proxy = TcpProxy(source.host, source.port)
    proxy.start()
    yield proxy, {**lake_env, "SOURCE_PG_DSN": f"postgresql://{source.user}@127.0.0.1:{proxy.port}/{source.dbname}"}
    proxy.stop()


def test_a_load_after_the_first_opens_only_the_planners_source_connection(source_proxy):
    """A tick with nothing new opened two source connections (the checks', the planner's) and
    re-ran every check; now the planner's snapshot is the only one, and a column the source gains
    meanwhile is still loaded at the next tick (the plan reads the shape in its own snapshot)."""
    proxy, env = source_proxy
    settings = load_settings(env)
    add_events(settings, 200, seed=1)
    with Pipeline(settings, engine="dlt", long_lived=True) as pipeline:
        assert pipeline.load().rows_inserted == 200
        before = proxy.accepted
        idle = pipeline.load()
        assert idle.rows_inserted == 0 and idle.rows_in_window == 0, idle.summary()
        assert proxy.accepted - before == 1  # the planner's exported snapshot, nothing else

        with psycopg.connect(resolve(settings).source_dsn.conninfo(), autocommit=True) as conn:
            conn.execute("ALTER TABLE public.events ADD COLUMN tenant text DEFAULT 'acme'")
        add_events(settings, 30, seed=2)
        assert pipeline.load().rows_inserted == 30
    # the rows loaded before the column came hold its default, as the source's older rows do
    assert lake_query(settings, "SELECT count(*) FILTER (WHERE tenant = 'acme') FROM lake.main.events") == [(230,)]
    assert_lake_equals_source(settings, expected_rows=230)


def test_after_a_failure_the_next_load_checks_everything_again(lake_env):
    """The events table dropped by hand under a follower: the load that meets it fails, and the
    next ones run the checks again, which stop with the way back; nothing is staged or set aside."""
    settings = load_settings(lake_env)
    add_events(settings, 100, seed=3)
    with Pipeline(settings, engine="dlt", long_lived=True) as pipeline:
        pipeline.load()
        with lake_session(pipeline.settings) as con:
            con.execute("DROP TABLE lake.main.events")
        add_events(settings, 10, seed=4)
        with pytest.raises(duckdb.CatalogException, match="events does not exist"):
            pipeline.load()
        for _ in range(2):
            with pytest.raises(PipelineError, match="dropped"):
                pipeline.load()
    assert staging.complete_batches(staging_folder(pipeline.settings)) == []
    assert staging.failed_batches(staging_folder(pipeline.settings)) == []


def test_a_load_that_fails_midway_says_which_step_and_what_it_had_done(lake_env, monkeypatch):
    """As dlt's PipelineStepFailed: a batch left staged is promoted, then the plan of the new
    window fails (the source lost): the error is the source's, and it carries the load's report
    so far (the promoted batch, its snapshot), so a notebook sees what did land."""
    from pipeline.errors import SourceUnavailable
    from pipeline.load import image_plan
    from pipeline.load.run import RunMode

    settings = load_settings(lake_env)
    add_events(settings, 120, seed=21)
    with Pipeline(settings, engine="dlt") as pipeline:
        staged = pipeline.run(RunMode.EXTRACT)
        assert staged.rows_inserted == 0 and len(staging.complete_batches(staging_folder(pipeline.settings))) == 1

        def lost(*_args, **_kwargs):
            raise SourceUnavailable("Lost the source Postgres (test).", "Check it.")

        monkeypatch.setattr(image_plan, "plan_batch", lost)
        with pytest.raises(SourceUnavailable) as failed:
            pipeline.run()
    assert failed.value.step == "run"
    partial = failed.value.partial
    assert partial is not None and partial.as_dict()["rows_inserted"] == 120
    assert "promoted 1 of 1 batch(es), 120 new rows" in partial.summary()
    assert lake_query(settings, "SELECT count(*) FROM lake.main.events") == [(120,)]
