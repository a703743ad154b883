"""One typed settings object, built once from the environment, ``.env`` and flags."""

from pipeline.settings.keys import ENV_KEYS
from pipeline.settings.load import Settings, load_settings
from pipeline.settings.model import (
    Engine,
    Intervals,
    Promotion,
    Reader,
    SchemaChanges,
    SparkOptions,
    StagingWriter,
    StorageOptions,
    TableSpec,
)
from pipeline.settings.resolve import ResolvedSettings

__all__ = ["ENV_KEYS", "Engine", "Intervals", "Promotion", "Reader", "ResolvedSettings", "SchemaChanges",
           "Settings", "SparkOptions", "StagingWriter", "StorageOptions", "TableSpec", "load_settings"]
