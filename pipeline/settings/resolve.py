"""Fill unset service settings with the embedded default, starting it when needed."""

from __future__ import annotations

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
    data_path = settings.data_path or str(settings.home / "data") + "/"
    return ResolvedSettings.of(settings, source_dsn=source_dsn, catalog=catalog, data_path=data_path)
