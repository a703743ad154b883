"""Fill unset service settings with the embedded default's, which the caller has started.

Resolving starts nothing: a caller that may run on the embedded default starts it first
(:func:`pipeline.embedded.resolved` does both, in that order) and hands its databases here.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import ConfigError
from pipeline.settings.catalog import CatalogSpec
from pipeline.settings.load import Settings
from pipeline.settings.model import TableSpec
from pipeline.settings.pgdsn import PgDsn


@dataclass(frozen=True)
class EmbeddedDefault:
    """The embedded Postgres's databases for the services that are not configured."""

    source_dsn: PgDsn | None = None
    catalog_dsn: PgDsn | None = None


@dataclass(frozen=True, kw_only=True)
class ResolvedSettings(Settings):
    """Settings whose source, catalog and data path are concrete (embedded default filled in)."""

    source_dsn: PgDsn
    catalog: CatalogSpec
    data_path: str

    def source_name(self, table: TableSpec) -> str:
        """Where ``table``'s batches are read from, for manifests: database and table, no credentials."""
        return f"{self.source_dsn.dbname}.{table.qualified}"

    @classmethod
    def of(cls, settings: Settings, **changes: object) -> ResolvedSettings:
        values = {name: getattr(settings, name) for name in settings.__dataclass_fields__}
        return cls(**{**values, **changes})

def needs_embedded(settings: Settings) -> bool:
    """No source or no catalog configured: the embedded default serves it."""
    if isinstance(settings, ResolvedSettings):
        return False
    return settings.source_dsn is None or settings.catalog is None


def resolve(settings: Settings, embedded: EmbeddedDefault | None = None) -> ResolvedSettings:
    """Settings with a source DSN, a catalog and a data path, all concrete."""
    if isinstance(settings, ResolvedSettings):
        return settings
    source_dsn, catalog = settings.source_dsn, settings.catalog
    if source_dsn is None or catalog is None:
        if embedded is None:  # a caller's mistake, not a user's: say which call was missed
            raise ValueError("no source or catalog is configured and the embedded default was not started: "
                             "resolve with pipeline.embedded.resolved(settings)")
        source_dsn = source_dsn or embedded.source_dsn
        if catalog is None and embedded.catalog_dsn is not None:
            catalog = CatalogSpec.embedded_default(embedded.catalog_dsn)
        if source_dsn is None or catalog is None:
            raise ValueError("the embedded default was started without the database this needs")
    data_path = settings.data_path or default_data_path(settings.home, settings.lake_name)
    refuse_shared_locations(data_path, settings.staging_path)
    source_dsn = source_dsn.with_timezone(settings.source_timezone)
    return ResolvedSettings.of(settings, source_dsn=source_dsn, catalog=catalog, data_path=data_path)


# folders no lake may own: maintenance deletes what its catalog never listed below its data path
_SYSTEM_FOLDERS = ("/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib64", "/opt", "/proc", "/root",
                   "/run", "/sbin", "/srv", "/sys", "/tmp", "/usr", "/var")


def _inside(child: str, parent: str) -> bool:
    return (child.rstrip("/") + "/").startswith(parent.rstrip("/") + "/")


def refuse_shared_locations(data_path: str, staging_path: str) -> None:
    """A lake's data folder is its own (pure): not the filesystem root, a system folder or a home
    folder, and not around or inside the staging folder (maintenance would delete waiting batches)."""
    if "://" not in data_path:
        folder = str(Path(data_path).expanduser().absolute()).rstrip("/") or "/"
        homes = {str(Path.home()).rstrip("/"), os.path.expanduser("~").rstrip("/")}
        if folder in _SYSTEM_FOLDERS or folder in homes:
            kind = "the filesystem root" if folder == "/" else "a home folder" if folder in homes \
                else "a system folder"
            raise ConfigError(
                f"DUCKLAKE_DATA_PATH={data_path} is {kind}: a lake owns its data folder, and its maintenance "
                "deletes files there that its catalog never listed. Nothing was created.",
                f"Point DUCKLAKE_DATA_PATH at a folder of its own, e.g. {folder.rstrip('/')}/lake-data/.")
    if _inside(staging_path, data_path) or _inside(data_path, staging_path):
        raise ConfigError(
            f"STAGING_PATH={staging_path} and DUCKLAKE_DATA_PATH={data_path} overlap: staged batches would "
            "sit in the lake's folder, where maintenance deletes files the catalog does not list. "
            "Nothing was created.",
            "Give staging a folder beside the data path, not inside it (e.g. …/staging and …/data).")


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
