"""Fill unset service settings with the embedded default, starting it when needed."""

from __future__ import annotations

from dataclasses import replace

from pipeline import embedded
from pipeline.catalog import CatalogSpec
from pipeline.config import Settings


def uses_embedded(settings: Settings) -> bool:
    return settings.source_dsn is None or settings.catalog is None


def resolve(settings: Settings) -> Settings:
    """Return settings with a source DSN, a catalog and a data path, all concrete."""
    changes: dict[str, object] = {}
    if uses_embedded(settings):
        server = embedded.ensure_running(settings.home)
        if settings.source_dsn is None:
            changes["source_dsn"] = embedded.ensure_database(server, embedded.SOURCE_DB)
        if settings.catalog is None:
            catalog_dsn = embedded.ensure_database(server, embedded.CATALOG_DB)
            changes["catalog"] = CatalogSpec(kind="postgres", pg=catalog_dsn)
    if settings.data_path is None:
        changes["data_path"] = str(settings.home / "data") + "/"
    return replace(settings, **changes) if changes else settings
