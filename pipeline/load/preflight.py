"""Check before creating: the source table is there and shaped right, and the data and staging
locations take writes — before a run creates lake tables, binds a catalog to a data path or
stages anything. Each failure names the value and the fix."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from pipeline import staging
from pipeline.errors import ConfigError, PipelineError, TransientError, is_transient
from pipeline.settings import ResolvedSettings
from pipeline.source import shape, stats
from pipeline.source.connect import connect as connect_source
from pipeline.storage.folder import Folder, is_object_store


def preflight(settings: ResolvedSettings, *, reads_source: bool) -> None:
    """Raise on what would fail later. The plan reads the source's shape again in its snapshot
    (the columns a load extracts are the ones that snapshot has)."""
    if reads_source:
        with connect_source(settings.source_dsn) as conn:
            for table in settings.tables:
                stats.require_table(conn, table.qualified)
                stats.require_select(conn, table.qualified)
                # raises on a missing or retyped column
                shape.check_shape(conn, shape.SourceRelation.of(conn, table), settings.schema_drift,
                                  settings.arrival_column)
    if not is_object_store(settings.data_path):  # object storage is checked by its first write
        _writable_folder(Path(settings.data_path), "DUCKLAKE_DATA_PATH")
    for table in settings.tables:
        _writable_staging(staging.table_dir(settings, table), settings.staging_path)


def _writable_folder(path: Path, key: str) -> None:
    probe = path / f".write-check-{secrets.token_hex(4)}"
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise ConfigError(f"{key} {path} cannot be written: {os.strerror(exc.errno or 0) or exc}. "
                          "Nothing was created or staged.",
                          f"Make {path} writable by this user (and give it free space), or point {key} "
                          "at another folder.") from None


def _writable_staging(folder: Folder, staging_path: str) -> None:
    """``folder`` (a table's, in ``STAGING_PATH=staging_path``) takes a write."""
    if folder.is_local:
        _writable_folder(Path(folder.path), "STAGING_PATH")
        return
    name = f".write-check-{secrets.token_hex(4)}"
    try:
        folder.write_text(name, "")
        folder.delete(name)
    except OSError as exc:
        error: PipelineError
        if is_transient(exc):
            error = TransientError(f"The object store for STAGING_PATH={staging_path} is "
                                   f"unreachable: {exc}", "Check S3_ENDPOINT and that the store runs; the "
                                   "next run retries.")
        else:
            error = ConfigError(f"STAGING_PATH={staging_path} cannot be written: {exc}",
                                "Check the bucket, the S3_* settings and the key's permissions.")
        raise error from None
