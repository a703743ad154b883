"""Check before creating: the source table is there and shaped right, and the data and staging
locations take writes — before a run creates lake tables, binds a catalog to a data path or
stages anything. Each failure names the value and the fix."""

from __future__ import annotations

import logging
import os
import secrets
from pathlib import Path

from pipeline import actions, staging
from pipeline.errors import ConfigError, PipelineError, TransientError, is_transient
from pipeline.lake import batches
from pipeline.lake.session import LakeTable
from pipeline.settings import ResolvedSettings
from pipeline.source import shape, stats
from pipeline.source.connect import connect as connect_source
from pipeline.storage.folder import Folder, is_object_store

log = logging.getLogger(__name__)


def preflight(settings: ResolvedSettings, *, reads_source: bool) -> None:
    """Raise on what would fail later. The plan reads the source's shape again in its snapshot
    (the columns a load extracts are the ones that snapshot has)."""
    if reads_source:
        with connect_source(settings.source_dsn) as conn:
            for table in settings.tables:
                stats.require_table(conn, table.qualified)
                stats.require_select(conn, table.qualified)
                # raises on a missing or retyped column
                shape.check_shape(conn, shape.SourceRelation.of(conn, table),
                                  settings.schema_changes_of(table.qualified), settings.arrival_column)
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


def refuse_tearing_an_image(lakes: list[LakeTable], leave_image: bool) -> None:
    """A table last loaded as one image with tables this run does not list (a cron job that lost
    part of its environment) is not loaded without them: its snapshot would hold rows whose linked
    rows in the other tables are not there. ``LEAVE_IMAGE`` (``--leave-image``) says the run
    leaves that image on purpose: its commit makes the listed tables the image from then on."""
    listed = {lake.name for lake in lakes}
    for lake in lakes:
        image = batches.loaded_with(lake)
        left_out = [t for t in image if t not in listed]
        if not left_out:
            continue
        if leave_image:
            log.warning("%s leaves its image with %s (LEAVE_IMAGE): its snapshots no longer hold them",
                        lake.name, ", ".join(left_out))
            continue
        raise ConfigError(
            f"Lake table {lake.events_table} is loaded as one image with {', '.join(left_out)}; loading "
            f"{', '.join(sorted(listed))} without {'it' if len(left_out) == 1 else 'them'} would commit a "
            "snapshot holding its rows without theirs. Nothing was read.",
            f"Load them together: SOURCE_TABLES listing {', '.join(sorted(listed | set(image)))} (in the "
            f"environment or .env). To load {', '.join(sorted(listed))} without {', '.join(left_out)} from "
            f"now on, leaving the image on purpose, run once with {actions.LEAVE_IMAGE}.")
