"""Settings read and refused at parse time (pure): malformed DSNs named without their password,
identifiers that could inject SQL, durations beyond a century, object-store secrets masked."""

from __future__ import annotations

import pytest

from pipeline.errors import ConfigError
from pipeline.lake.attach_sql import open_statements, storage_secret_sql
from pipeline.settings import StorageOptions, load_settings
from pipeline.settings.catalog import CatalogSpec
from pipeline.settings.pgdsn import PgDsn
from pipeline.settings.secret import Secret


def test_malformed_dsns_name_the_problem_without_the_password():
    for dsn in ("postgresql://u:pa%zzsecret@h:5432/db", "postgresql://u:pa secret@h:port/db"):
        with pytest.raises(ConfigError) as err:
            PgDsn.parse(dsn, "SOURCE_PG_DSN")
        assert "secret" not in str(err.value) and "SOURCE_PG_DSN" in str(err.value)
        assert "Percent-encode" in err.value.hint or "digits" in err.value.hint
    # unencoded characters in the password itself are read as the user meant them, never shown
    lenient = PgDsn.parse("postgresql://u:pa secret/x@y@h/db", "SOURCE_PG_DSN")
    assert lenient.password.reveal() == "pa secret/x@y" and "secret" not in lenient.masked()


@pytest.mark.parametrize(("key", "value"), [("SOURCE_TABLE", "events; DROP TABLE x"),
                                            ("SOURCE_TABLE", 'public."events"'),
                                            ("DUCKLAKE_NAME", "lake; DETACH lake")])
def test_injection_through_identifiers_is_refused(key, value):
    with pytest.raises(ConfigError) as err:
        load_settings({key: value})
    assert key in str(err.value) and value in str(err.value)


@pytest.mark.parametrize(("key", "value"), [("LOOKBACK", "999999d"), ("RECONCILE_SINCE", "40000d"),
                                            ("RETENTION", "100000w")])
def test_durations_beyond_a_century_are_refused_at_parse_time(key, value):
    with pytest.raises(ConfigError, match=f"{key} '{value}' is longer than the longest duration accepted"):
        load_settings({key: value})


@pytest.mark.parametrize(("dsn", "shown", "secret"), [
    ("postgresql://app:Hunter2/TopSecret@host/db", None, "Hunter2"),
    ("postgresql://app:pw@host:99999/db", "postgresql://app:***@host:99999/db", "pw"),
    ("host=h user=u password='\" x;", "host=h user=u password=***", "x;"),
    ("host=h port=abc password=pass_1234", "host=h port=abc password=***", "pass_1234"),
    # an unquoted space inside the password: its second half is the password too
    ("host=127.0.0.1 dbname=x password=Kx7hunter2 Kx7SecretWord", "host=127.0.0.1 dbname=x password=***",
     "Kx7SecretWord"),
    ("host=h password=a b c user=u", "host=h password=*** user=u", "b c"),
])
def test_a_malformed_dsn_names_the_setting_and_masks_the_whole_password(dsn, shown, secret):
    if shown is None:  # an unencoded / in the password is read as part of it, not as a port
        assert PgDsn.parse(dsn, "SOURCE_PG_DSN").password.reveal() == "Hunter2/TopSecret"
        return
    with pytest.raises(ConfigError) as caught:
        load_settings({"SOURCE_PG_DSN": dsn})
    message = str(caught.value) + (caught.value.hint or "")
    assert message.startswith(f"SOURCE_PG_DSN {shown!r}")
    assert secret not in message


def test_a_dsn_that_is_no_dsn_is_shown_readably_and_named_by_its_flag():
    with pytest.raises(ConfigError, match="--dsn 'not a dsn' is not a Postgres connection string"):
        PgDsn.parse("not a dsn", "--dsn")


def test_gcs_and_r2_secrets_are_generated_and_masked():
    gcs = storage_secret_sql("lake", "gs://bucket/lake/", StorageOptions(key_id="HMACKEY", secret=Secret("HMACSECRET")), False)
    assert gcs == ("CREATE OR REPLACE SECRET lake_storage (TYPE gcs, KEY_ID 'HMACKEY', SECRET '***', "
                   "SCOPE 'gs://bucket/lake/')")
    r2 = storage_secret_sql("lake", "r2://bucket/lake/", StorageOptions(key_id="K", secret=Secret("S"), account_id="acc123"),
                            True)
    assert r2 == ("CREATE OR REPLACE SECRET lake_storage (TYPE r2, KEY_ID 'K', SECRET 'S', ACCOUNT_ID 'acc123', "
                  "SCOPE 'r2://bucket/lake/')")
    chain = storage_secret_sql("lake", "s3://b/p/", StorageOptions(region="eu-west-1"), False)
    assert "PROVIDER credential_chain" in chain and "REGION 'eu-west-1'" in chain
    statements = open_statements("lake", CatalogSpec.parse("sqlite:/x/c.sqlite"), "gs://bucket/lake/")
    assert statements[:2] == ["LOAD sqlite", "LOAD httpfs"]
    assert statements[-1].startswith("ATTACH 'ducklake:sqlite:/x/c.sqlite' AS lake (DATA_PATH 'gs://bucket/lake/'")


def test_one_set_of_s3_settings_reaches_duckdb_pyarrow_and_spark_alike():
    """The three spellings come from one place: the same endpoint, TLS, addressing and keys."""
    from pipeline.storage.object_store import ObjectStore

    store = ObjectStore(StorageOptions(key_id="KEY", secret=Secret("SECRET"), region="eu-west-1",
                                       endpoint="127.0.0.1:9000", url_style="path", use_ssl=False))
    duck = ", ".join(store.duckdb_secret("s3", show_secrets=False))
    assert "ENDPOINT '127.0.0.1:9000'" in duck and "USE_SSL false" in duck and "URL_STYLE 'path'" in duck
    assert "SECRET" in duck and "'SECRET'" not in duck  # masked unless --show-secrets
    assert store.pyarrow() == {"access_key": "KEY", "secret_key": "SECRET", "region": "eu-west-1",
                               "endpoint_override": "127.0.0.1:9000", "scheme": "http"}
    assert store.s3a() == {"fs.s3a.access.key": "KEY", "fs.s3a.secret.key": "SECRET",
                           "fs.s3a.endpoint": "http://127.0.0.1:9000", "fs.s3a.endpoint.region": "eu-west-1",
                           "fs.s3a.connection.ssl.enabled": "false", "fs.s3a.path.style.access": "true"}
    chain = ObjectStore(StorageOptions(url_style="vhost"))
    assert "PROVIDER credential_chain" in chain.duckdb_secret("s3", False)
    assert chain.pyarrow() == {"force_virtual_addressing": True} and chain.s3a() == {
        "fs.s3a.path.style.access": "false"}


def test_a_catalog_and_reader_naming_different_databases_blame_neither_and_name_both():
    """A typo in DUCKLAKE_CATALOG's database name was blamed on DUCKLAKE_CATALOG_READER."""
    with pytest.raises(ConfigError) as err:
        load_settings({"SOURCE_PG_DSN": "postgresql://postgres@127.0.0.1/src",
                       "DUCKLAKE_CATALOG": "postgresql://lake:pw@127.0.0.1/catalgo",
                       "DUCKLAKE_CATALOG_READER": "postgresql://lake_reader:rpw@127.0.0.1/catalog"})
    message = str(err.value)
    assert "DUCKLAKE_CATALOG and DUCKLAKE_CATALOG_READER name different catalogs" in message
    assert "database 'catalgo' against 'catalog'" in message and "whichever" in err.value.hint
    assert "pw" not in message.replace("password", "")


def test_a_source_retention_shorter_than_the_look_back_is_refused_naming_both():
    """Every load reads the look-back again: a source keeping less cannot serve it."""
    with pytest.raises(ConfigError) as err:
        load_settings({"SOURCE_RETENTION": "10m", "LOOKBACK": "15m"})
    assert "SOURCE_RETENTION=10m is shorter than LOOKBACK=15m" in str(err.value)
    assert load_settings({"SOURCE_RETENTION": "30d"}).source_retention.days == 30
    assert not load_settings({}).source_retention  # the source keeps every row
