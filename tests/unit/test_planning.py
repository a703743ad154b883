"""Pure planning logic: windows, partitions, durations, DSNs, catalogs, ATTACH SQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from pipeline.errors import ConfigError
from pipeline.extract.partitions import page_predicate, page_ranges, plan_partitions, time_chunks
from pipeline.extract.spark_session import DEBIAN_JAR, MAVEN_COORDINATE, resolve_jdbc_driver
from pipeline.lake.attach_sql import open_statements
from pipeline.settings import StorageOptions, load_settings
from pipeline.settings.catalog import CatalogSpec
from pipeline.settings.durations import format_duration, parse_duration
from pipeline.settings.pgdsn import PgDsn
from pipeline.settings.secret import Secret
from pipeline.source.window import Arrivals, Window, plan_window

T = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


def test_first_window_takes_everything_up_to_upper():
    assert plan_window(None, timedelta(minutes=15), T) == Window(low=None, upper=T)


def test_next_window_rereads_the_lookback():
    window = plan_window(T - timedelta(hours=1), timedelta(minutes=15), T)
    assert window.low == T - timedelta(hours=1, minutes=15) and window.upper == T
    # rows without a timestamp are read by every window, so they reach the quarantine
    assert window.literal_sql() == ("(event_timestamp > '2026-11-21T10:45:00.000000+00:00'::timestamptz "
                                    "AND event_timestamp <= '2026-11-21T12:00:00.000000+00:00'::timestamptz "
                                    "OR event_timestamp IS NULL)")


def test_an_arrival_rule_narrows_the_window_to_what_arrived_or_became_due():
    arrivals = Arrivals("created_at", after=T - timedelta(seconds=30), due_after=T - timedelta(seconds=29))
    window = plan_window(T - timedelta(hours=1), timedelta(minutes=15), T, arrivals)
    assert window.low == T - timedelta(hours=1, minutes=15)  # the look-back still bounds the read
    assert window.literal_sql().endswith(
        " AND (\"created_at\" > '2026-11-21T11:59:30.000000+00:00'::timestamptz OR event_timestamp > "
        "'2026-11-21T11:59:31.000000+00:00'::timestamptz OR \"created_at\" IS NULL)")
    assert window.params() == {"low": window.low, "upper": T, "arrived_after": arrivals.after,
                               "due_after": arrivals.due_after}
    assert "%(arrived_after)s" in window.where_sql() and "arrived after" in window.describe()
    # a first load reads everything, whatever an earlier lake recorded
    assert plan_window(None, timedelta(minutes=15), T, arrivals).arrivals is None
    # every time chunk of the window keeps the rule
    chunks = time_chunks(window, 900, T - timedelta(minutes=1), T, rows_per_chunk=300)
    assert len(chunks) == 3 and all(chunk.arrivals == arrivals for chunk in chunks)


@pytest.mark.parametrize(("rows", "cores", "expected"), [
    (0, 2, 1), (10_000, 2, 1), (60_000, 2, 2), (1_000_000, 2, 4), (100_000_000, 2, 8), (1_000_000, 16, 16)])
def test_partitions_follow_rows_and_cores(rows, cores, expected):
    assert plan_partitions(rows, cores) == expected


def test_durations_round_trip():
    assert parse_duration("15m") == timedelta(minutes=15)
    assert parse_duration("1w") == timedelta(days=7)
    assert parse_duration("90s") == timedelta(seconds=90) and parse_duration("0") == timedelta(0)
    with pytest.raises(ConfigError, match="'7' has no unit: 7s, 7m, 7h or 7d"):
        parse_duration("7", "--retention")  # meant as a week, it was 7 seconds: every snapshot expired
    assert format_duration(timedelta(hours=2)) == "2h"


def test_bad_duration_says_how_to_write_one():
    with pytest.raises(ConfigError, match="30s, 15m, 1h"):
        parse_duration("soon", "LOOKBACK")


def test_dsn_password_never_prints():
    dsn = PgDsn.parse("postgresql://bob:hunter2@db:6543/app?sslmode=require")
    for text in (str(dsn), repr(dsn), dsn.masked(), dsn.jdbc_url(), dsn.params_without_password()):
        assert "hunter2" not in text
    assert dsn.jdbc_url() == "jdbc:postgresql://db:6543/app?sslmode=require"
    assert "password=hunter2" in dsn.conninfo()


def test_libpq_key_value_dsn_is_accepted():
    dsn = PgDsn.parse("host=h port=5433 dbname=d user=u password=p")
    assert (dsn.host, dsn.port, dsn.dbname, dsn.user) == ("h", 5433, "d", "u")


def test_malformed_dsn_gives_a_hint_and_no_password():
    with pytest.raises(ConfigError) as err:
        PgDsn.parse("host=x password=topsecret nonsense")
    assert "topsecret" not in str(err.value) and "postgresql://" in str(err.value)


@pytest.mark.parametrize(("text", "kind"), [
    ("postgresql://u@h/db", "postgres"), ("host=h dbname=c", "postgres"),
    ("sqlite:/tmp/c.sqlite", "sqlite"), ("duckdb:/tmp/c.ducklake", "duckdb")])
def test_catalog_forms(text, kind):
    assert CatalogSpec.parse(text).kind == kind


def test_unknown_catalog_lists_accepted_forms():
    with pytest.raises(ConfigError, match="sqlite:path"):
        CatalogSpec.parse("mysql://x")


def test_attach_sql_keeps_credentials_in_a_masked_secret():
    catalog = CatalogSpec.parse("postgresql://lake:s3cret@cat:5432/catalog")
    statements = open_statements("lake", catalog, "s3://bucket/lake/",
                                 storage=StorageOptions(key_id="AK", secret=Secret("SK"), endpoint="minio:9000",
                                                        url_style="path", use_ssl=False))
    text = "\n".join(statements)
    assert "s3cret" not in text and "SK" not in text and text.count("'***'") == 2
    attach = statements[-1]
    assert attach.startswith("ATTACH 'ducklake:") and "SECRET': 'lake_catalog'" in attach
    assert "METADATA_SCHEMA 'lake'" in attach
    shown = "\n".join(open_statements("lake", catalog, "s3://bucket/lake/", show_secrets=True,
                                      storage=StorageOptions(key_id="AK", secret=Secret("SK"))))
    assert "s3cret" in shown and "'SK'" in shown


def test_jdbc_driver_discovery_order():
    assert resolve_jdbc_driver("/opt/pg.jar", lambda p: True).value == "/opt/pg.jar"
    assert resolve_jdbc_driver(None, lambda p: p == DEBIAN_JAR).value == DEBIAN_JAR
    assert resolve_jdbc_driver(None, lambda p: False).value == MAVEN_COORDINATE
    with pytest.raises(ConfigError, match="does not exist"):
        resolve_jdbc_driver("/missing.jar", lambda p: False)


def test_settings_defaults_use_the_embedded_home(tmp_path):
    settings = load_settings({"EVENT_LAKE_HOME": str(tmp_path)})
    assert settings.source_dsn is None and settings.catalog is None
    assert settings.staging_path == str(tmp_path / "staging")
    assert settings.events_table == "lake.main.events" and settings.lookback == timedelta(minutes=15)


def test_resolving_starts_nothing_it_fills_in_what_the_caller_started(tmp_path):
    """pipeline.settings.resolve is pure: the embedded Postgres is the caller's explicit step
    (pipeline.embedded.resolved), and only the unset services take its databases."""
    from pipeline.settings.resolve import EmbeddedDefault, needs_embedded, resolve

    bare = load_settings({"EVENT_LAKE_HOME": str(tmp_path)})
    assert needs_embedded(bare)
    with pytest.raises(ValueError, match="pipeline.embedded.resolved"):
        resolve(bare)
    assert not (tmp_path / "pg").exists()  # nothing was started
    embedded_src = PgDsn.parse("postgresql://postgres@127.0.0.1:6000/event_lake_source")
    embedded_cat = PgDsn.parse("postgresql://postgres@127.0.0.1:6000/event_lake_catalog")
    own_source = load_settings({"EVENT_LAKE_HOME": str(tmp_path),
                                "SOURCE_PG_DSN": "postgresql://app@db.internal:5432/app"})
    resolved = resolve(own_source, EmbeddedDefault(catalog_dsn=embedded_cat))
    assert resolved.source_dsn.host == "db.internal" and resolved.catalog.pg.dbname == "event_lake_catalog"
    assert resolve(bare, EmbeddedDefault(embedded_src, embedded_cat)).source_dsn.port == 6000
    assert not needs_embedded(resolved) and resolve(resolved) is resolved


def test_bad_table_name_is_refused():
    with pytest.raises(ConfigError, match="SOURCE_TABLE"):
        load_settings({"SOURCE_TABLE": "events; drop table x"})


@pytest.mark.parametrize("uri", ["s3a://bucket/staging", "hdfs://nn/staging", "file://relative/x"])
def test_staging_uri_schemes_it_cannot_write_are_refused(uri):
    with pytest.raises(ConfigError, match="URI scheme") as err:
        load_settings({"STAGING_PATH": uri})
    assert uri in str(err.value) and "same absolute path" in err.value.hint


def test_file_uri_staging_is_the_folder(tmp_path):
    assert load_settings({"STAGING_PATH": f"file://{tmp_path}/st"}).staging_path == str(tmp_path / "st")


def test_spark_conf_comes_from_the_environment_and_flags_override_it():
    settings = load_settings({"SPARK_CONF": "spark.executor.memory=4g; spark.cores.max=8"},
                             spark_conf=["spark.cores.max=2", "spark.kubernetes.namespace=etl"])
    assert settings.spark.conf == {"spark.executor.memory": "4g", "spark.cores.max": "2",
                                   "spark.kubernetes.namespace": "etl"}


@pytest.mark.parametrize(("env", "flags", "message"), [
    ({"SPARK_CONF": "executor.memory=4g"}, [], "SPARK_CONF entry"),
    ({}, ["spark.cores.max"], "--spark-conf entry"),
    ({"SPARK_PARTITIONS": "0"}, [], "SPARK_PARTITIONS '0'"),
])
def test_malformed_spark_settings_are_refused(env, flags, message):
    with pytest.raises(ConfigError, match=message):
        load_settings(env, spark_conf=flags)


def test_spark_conf_cannot_break_the_settings_the_extractor_needs(tmp_path):
    from pipeline.extract.spark_session import build_session

    settings = load_settings({"EVENT_LAKE_HOME": str(tmp_path)},
                             spark_conf=["spark.sql.session.timeZone=Europe/Berlin"])
    with pytest.raises(ConfigError, match="spark.sql.session.timeZone"):
        build_session(settings)


def test_time_chunks_cover_the_window_exactly_once():

    window = Window(low=T - timedelta(hours=2), upper=T)
    first, last = T - timedelta(hours=1, minutes=59), T - timedelta(seconds=1)
    chunks = time_chunks(window, 1_000, first, last, rows_per_chunk=300)
    assert len(chunks) == 4
    assert chunks[0].low == window.low and chunks[-1].upper == window.upper
    assert all(a.upper == b.low for a, b in zip(chunks, chunks[1:], strict=False))
    assert all(c.low < c.upper for c in chunks)
    assert [c.nulls for c in chunks] == [True, False, False, False]  # NULL timestamps read once
    assert time_chunks(window, 100, first, last, rows_per_chunk=300) == [window]
    assert time_chunks(Window(None, T), 900, first, last, rows_per_chunk=300)[0].low is None


def test_a_window_holding_much_of_the_table_is_read_in_page_ranges_that_cover_every_page():
    ranges = page_ranges(window_rows=900, table_rows=1_000, table_pages=100, count=4)
    assert ranges == [(0, 25), (25, 50), (50, 75), (75, None)]  # the last open: pages added since
    assert page_ranges(900, 1_000, 10, 3) == [(0, 4), (4, 8), (8, None)]
    assert page_ranges(100, 1_000, 100, 4) == []  # a small window: time slices over the index
    assert page_ranges(100, 0, 100, 4, whole=True) == [(0, 25), (25, 50), (50, 75), (75, None)]  # not analyzed
    assert page_ranges(900, 1_000, 100, 1) == [] and page_ranges(0, 0, 0, 4, whole=True) == []
    assert page_predicate((25, 50)) == "ctid >= '(25,0)'::tid AND ctid < '(50,0)'::tid"
    assert page_predicate((75, None)) == "ctid >= '(75,0)'::tid"
