"""One typed settings object, built once from the environment, ``.env`` and flags."""

from pipeline.settings.keys import ENV_KEYS
from pipeline.settings.load import load_settings
from pipeline.settings.model import Intervals, ResolvedSettings, Settings, SparkOptions, StorageOptions

__all__ = ["ENV_KEYS", "Intervals", "ResolvedSettings", "Settings", "SparkOptions", "StorageOptions",
           "load_settings"]
