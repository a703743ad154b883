"""Pick the extraction engine by name; each engine's heavy imports happen only when chosen."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline.errors import ConfigError
from pipeline.settings import ResolvedSettings
from pipeline.settings.model import Reader

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from pipeline.extract.batch import Extractor

ENGINES = ("spark", "dlt")


def make_extractor(engine: str, settings: ResolvedSettings, spark: SparkSession | None = None) -> Extractor:
    if engine == "spark":
        from pipeline.extract.spark_engine import SparkExtractor
        from pipeline.extract.spark_session import build_session

        if spark is not None:
            return SparkExtractor(spark)
        extractor = SparkExtractor(build_session(settings))
        if settings.spark.reader is Reader.ARROW:
            # a new session: start the Python workers with the JVM (and check they can run the
            # reader), as the scheduler does at start; part of the engine's start, not the read
            extractor.warm_up(settings)
        return extractor
    if engine == "dlt":
        from pipeline.extract.dlt_engine import DltExtractor

        return DltExtractor()
    raise ConfigError(f"Unknown engine {engine!r}.", f"Use one of: {', '.join(ENGINES)}.")
