"""Fault injection is the tests' own (tests/faults.py): the product has no fault setting, no
fault parameter and no fault module; a production .env could ask the pipeline to SIGKILL itself."""

from __future__ import annotations

import importlib.util
import inspect

import pytest

from pipeline.settings import ENV_KEYS, load_settings
from tests import faults


def test_the_product_has_no_fault_switch():
    assert "EVENT_LAKE_FAULT" not in ENV_KEYS and importlib.util.find_spec("pipeline.faults") is None
    assert not hasattr(load_settings({"EVENT_LAKE_FAULT": "after-stage"}), "fault")
    from pipeline.extract.batch import ExtractRequest
    from pipeline.ops.scheduler import Scheduler
    from pipeline.promote.promotion import promote_together
    from tests.helpers import run

    for product in (run, promote_together, Scheduler.__init__, ExtractRequest):
        assert "faults" not in inspect.signature(product).parameters, product


def test_the_seam_breaks_named_points_and_only_those(monkeypatch):
    from datetime import UTC, datetime

    from pipeline.extract import spark_arrow, spark_engine
    from pipeline.source.window import Window

    plain = spark_arrow.select_sql("public.events", Window(None, datetime(2026, 1, 1, tzinfo=UTC)))
    faults.install("slow-read", monkeypatch.setattr)
    slowed = spark_arrow.select_sql("public.events", Window(None, datetime(2026, 1, 1, tzinfo=UTC)))
    assert slowed == faults.slow_query(plain) and "pg_sleep(30)" in slowed
    assert spark_engine.jdbc_options.__wrapped__ is not None  # the JDBC reader's reads are slowed too
    with pytest.raises(ValueError, match="after-stag"):
        faults.install("after-stag", monkeypatch.setattr)
