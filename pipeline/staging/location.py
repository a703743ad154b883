"""Where staged batches live: ``STAGING_PATH`` (a folder or ``s3://bucket/prefix``) and each
table's folder in it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline.storage.folder import Folder, folder_of

if TYPE_CHECKING:
    from pipeline.settings import Settings, TableSpec


def staging_root(settings: Settings) -> Folder:
    """``STAGING_PATH`` as a :class:`Folder` (a folder or ``s3://bucket/prefix``)."""
    return folder_of(settings.staging_path, settings.storage)


def table_dir(settings: Settings, table: TableSpec) -> Folder:
    """``STAGING_PATH/<table>``: where ``table``'s batches are staged."""
    return staging_root(settings).child(table.name)
