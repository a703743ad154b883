"""One typed settings object, built once from the environment, ``.env`` and flags."""

from pipeline.settings.keys import ENV_KEYS
from pipeline.settings.load import load_settings
from pipeline.settings.model import (
    Engine,
    Intervals,
    Promotion,
    Reader,
    ResolvedSettings,
    Settings,
    SparkOptions,
    StagingWriter,
    StorageOptions,
)

__all__ = ["ENV_KEYS", "Engine", "Intervals", "Promotion", "Reader", "ResolvedSettings", "Settings",
           "SparkOptions", "StagingWriter", "StorageOptions", "load_settings"]
