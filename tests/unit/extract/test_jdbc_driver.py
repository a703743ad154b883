"""Where the JDBC reader's driver comes from (pipeline/extract/spark_session.py), pure."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from pipeline.errors import ConfigError
from pipeline.extract.spark_session import DEBIAN_JAR, MAVEN_COORDINATE, resolve_jdbc_driver

T = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


def test_jdbc_driver_discovery_order():
    assert resolve_jdbc_driver("/opt/pg.jar", lambda p: True).value == "/opt/pg.jar"
    assert resolve_jdbc_driver(None, lambda p: p == DEBIAN_JAR).value == DEBIAN_JAR
    assert resolve_jdbc_driver(None, lambda p: False).value == MAVEN_COORDINATE
    with pytest.raises(ConfigError, match="does not exist"):
        resolve_jdbc_driver("/missing.jar", lambda p: False)

