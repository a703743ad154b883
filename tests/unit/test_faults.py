"""The crash tests' seam: the product's runs get no faults; EVENT_LAKE_FAULT names one point."""

import pytest

from pipeline import faults
from pipeline.errors import ConfigError
from pipeline.settings import load_settings


def test_the_product_seam_changes_nothing():
    query = "SELECT 1"
    assert faults.injected(None) is faults.NO_FAULTS
    assert faults.NO_FAULTS.read_query(query) == query
    faults.NO_FAULTS.after_stage()  # returns: nothing is killed
    faults.NO_FAULTS.before_commit(object())


def test_slow_read_wraps_each_slice_query_and_other_points_leave_it():
    slow = faults.injected("slow-read").read_query("SELECT 1")
    assert "pg_sleep(30)" in slow and "(SELECT 1) q" in slow
    assert faults.injected("after-stage").read_query("SELECT 1") == "SELECT 1"


def test_lose_lock_closes_the_lease_connection_and_only_that_point_does():
    class Conn:
        closed = False

        def close(self) -> None:
            self.closed = True

    class Lease:
        def __init__(self) -> None:
            self.conn = Conn()

    lease, kept = Lease(), Lease()
    faults.injected("lose-lock").before_commit(lease)
    faults.injected("slow-read").before_commit(kept)
    assert lease.conn.closed and not kept.conn.closed


def test_an_unknown_fault_point_is_a_configuration_error_naming_the_points():
    with pytest.raises(ConfigError) as err:
        load_settings({"EVENT_LAKE_FAULT": "after-stag"})
    assert "EVENT_LAKE_FAULT 'after-stag'" in str(err.value) and "after-stage" in str(err.value)
    assert load_settings({"EVENT_LAKE_FAULT": "before-commit"}).fault == "before-commit"
