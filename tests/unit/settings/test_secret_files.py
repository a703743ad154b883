"""``*_FILE`` keys: a secret read from a file (a mounted Docker or Kubernetes secret) instead of the
environment; a missing, empty or doubly given one is refused naming the key, never the secret."""

from __future__ import annotations

import pytest

from pipeline.errors import ConfigError
from pipeline.settings import load_settings


def test_each_secret_is_read_from_its_file_with_the_newline_dropped(tmp_path):
    secrets = {"SOURCE_PG_DSN": "postgresql://events:s3cr3t@db:5432/events",
               "DUCKLAKE_CATALOG": "postgresql://lake:l4ke@db:5432/catalog",
               "S3_SECRET_ACCESS_KEY": "minio-s3cr3t", "METRICS_TOKEN": "t0ken"}
    env = {}
    for key, value in secrets.items():
        (tmp_path / key).write_text(value + "\n")
        env[f"{key}_FILE"] = str(tmp_path / key)
    settings = load_settings(env)
    assert settings.source_dsn is not None and settings.source_dsn.password.reveal() == "s3cr3t"
    assert settings.catalog is not None and "l4ke" not in settings.catalog.describe()
    assert settings.storage.secret is not None and settings.storage.secret.reveal() == "minio-s3cr3t"
    assert settings.metrics_token is not None and settings.metrics_token.reveal() == "t0ken"


@pytest.mark.parametrize(("setup", "words"), [
    ("missing", "no such file"),
    ("empty", "is empty"),
    ("both", "METRICS_TOKEN and METRICS_TOKEN_FILE are both set"),
])
def test_a_bad_secret_file_is_refused_naming_the_key_not_the_secret(tmp_path, setup, words):
    path = tmp_path / "token"
    env = {"METRICS_TOKEN_FILE": str(path)}
    if setup == "empty":
        path.write_text("\n")
    if setup == "both":
        path.write_text("from-the-file")
        env["METRICS_TOKEN"] = "from-the-environment"
    with pytest.raises(ConfigError) as refused:
        load_settings(env)
    text = f"{refused.value} {refused.value.hint}"
    assert words in text and "METRICS_TOKEN" in text, text
    assert "from-the-file" not in text and "from-the-environment" not in text
