"""The ATTACH and CREATE SECRET SQL (pipeline/lake/attach_sql.py), pure."""

from __future__ import annotations

from datetime import UTC, datetime

from pipeline.lake.attach_sql import open_statements
from pipeline.settings import StorageOptions
from pipeline.settings.catalog import CatalogSpec
from pipeline.settings.secret import Secret

T = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


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

