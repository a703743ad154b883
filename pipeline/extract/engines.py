"""Pick the extraction engine by name; each engine's heavy imports happen only when chosen."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline.errors import ConfigError
from pipeline.settings import ResolvedSettings
from pipeline.settings.model import Engine, Reader

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from pipeline.extract.batch import Extractor

ENGINES = tuple(Engine)


def engine_of(name: str) -> Engine:
    """The engine ``name`` names, or a clear error."""
    try:
        return Engine(name)
    except ValueError:
        raise ConfigError(f"Unknown engine {name!r}.", f"Use one of: {', '.join(ENGINES)}.") from None


def make_extractor(engine: str, settings: ResolvedSettings, spark: SparkSession | None = None) -> Extractor:
    engine = engine_of(engine)
    if engine is Engine.SPARK:
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
    from pipeline.extract.dlt_engine import DltExtractor

    return DltExtractor()
