"""Fill unset service settings with the embedded default, starting it when needed."""

from __future__ import annotations

import json
from pathlib import Path

from pipeline.settings.catalog import CatalogSpec
from pipeline.settings.model import ResolvedSettings, Settings


def resolve(settings: Settings) -> ResolvedSettings:
    """Settings with a source DSN, a catalog and a data path, all concrete."""
    if isinstance(settings, ResolvedSettings):
        return settings
    source_dsn, catalog = settings.source_dsn, settings.catalog
    if source_dsn is None or catalog is None:
        from pipeline import embedded

        server = embedded.ensure_running(settings.home)
        if source_dsn is None:
            source_dsn = embedded.ensure_database(server, embedded.SOURCE_DB)
        if catalog is None:
            catalog = CatalogSpec(kind="postgres", pg=embedded.ensure_database(server, embedded.CATALOG_DB))
    data_path = settings.data_path or default_data_path(settings.home, settings.lake_name)
    source_dsn = source_dsn.with_timezone(settings.source_timezone)
    return ResolvedSettings.of(settings, source_dsn=source_dsn, catalog=catalog, data_path=data_path)


# the file that names the lake owning a data folder (see pipeline.lake.ownership)
DATA_FOLDER_MARKER = ".event-lake.json"


def default_data_path(home: Path, lake_name: str) -> str:
    """``<home>/data/<lake name>/``: lakes of the default setup never share a data folder.

    A lake made before data folders were per lake keeps ``<home>/data/`` (DuckLake refuses to
    attach a lake at another data path than the one it was made with): that folder is kept
    when its marker names this lake, or when it holds a lake's files and no marker yet (its
    lake claims it on the next run; another lake is then refused there by name)."""
    shared = home / "data"
    own = f"{shared / lake_name}/"
    try:
        claimed_by = json.loads((shared / DATA_FOLDER_MARKER).read_text()).get("lake_name")
    except FileNotFoundError:
        claimed_by = None
    except (OSError, ValueError, AttributeError):
        return own
    if claimed_by == lake_name or (claimed_by is None and (shared / "main").is_dir()):
        return f"{shared}/"
    return own
