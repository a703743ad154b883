"""Incremental event pipeline: Postgres -> staging Parquet -> DuckLake.

The public face, for a notebook or a program::

    from pipeline import Pipeline, Settings

    settings = Settings(source_pg_dsn="postgresql://app@db/app", ducklake_catalog="postgresql://lake@db/lake")
    with Pipeline(settings) as lake:
        report = lake.run()
    print(report.summary())

Names are imported on first use: ``import pipeline.settings`` (what every command does first)
does not pay for Spark, DuckDB and the load path.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from pipeline.version import __version__

_PUBLIC = {
    "Pipeline": "pipeline.ops.pipeline",
    "Settings": "pipeline.settings.load",
    "load_settings": "pipeline.settings.load",
    "RunReport": "pipeline.load.report",
    "MaintenanceReport": "pipeline.lake.maintain",
    "ReconcileReport": "pipeline.load.reconcile",
    "Status": "pipeline.ops.status",
    "PipelineError": "pipeline.errors",
    "ConfigError": "pipeline.errors",
    "TransientError": "pipeline.errors",
}
__all__ = ["ConfigError", "MaintenanceReport", "Pipeline", "PipelineError", "ReconcileReport", "RunReport",
           "Settings", "Status", "TransientError", "__version__", "load_settings"]

if TYPE_CHECKING:
    from pipeline.errors import ConfigError, PipelineError, TransientError
    from pipeline.lake.maintain import MaintenanceReport
    from pipeline.load.reconcile import ReconcileReport
    from pipeline.load.report import RunReport
    from pipeline.ops.pipeline import Pipeline
    from pipeline.ops.status import Status
    from pipeline.settings.load import Settings, load_settings


def __getattr__(name: str) -> object:
    where = _PUBLIC.get(name)
    if where is None:
        raise AttributeError(f"module 'pipeline' has no attribute {name!r}")
    module, attribute = where if isinstance(where, tuple) else (where, name)
    return getattr(importlib.import_module(module), attribute)
