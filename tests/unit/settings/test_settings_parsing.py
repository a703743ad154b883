"""Settings parsed and resolved (pipeline/settings), pure: durations, DSNs, catalogs, staging, Spark."""

from __future__ import annotations

from datetime import timedelta

import pytest

from pipeline.errors import ConfigError
from pipeline.settings import load_settings
from pipeline.settings.catalog import CatalogSpec
from pipeline.settings.durations import format_duration, parse_duration
from pipeline.settings.pgdsn import PgDsn


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






def test_settings_defaults_use_the_embedded_home(tmp_path):
    settings = load_settings({"EVENT_LAKE_HOME": str(tmp_path)})
    assert settings.source_dsn is None and settings.catalog is None
    assert settings.staging_path == str(tmp_path / "staging")
    [table] = settings.tables
    assert settings.lake_table(table) == "lake.main.events" and settings.lookback == timedelta(minutes=15)


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




