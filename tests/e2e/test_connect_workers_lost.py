"""A Spark Connect server's cluster losing its only worker mid-load (tests/e2e/worker_loss.py): the
client warns naming the master through the server, /healthz says so, the load fails as temporary
after SPARK_EXECUTOR_WAIT, and the next run with a worker back loads everything once."""

from __future__ import annotations

import shutil

import pytest

from tests.e2e.worker_loss import only_worker_dies

pytestmark = pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux unshare")


def test_a_connect_load_whose_only_worker_died_fails_naming_the_master_and_healthz_says_so_while_it_waits(
        settings, lake_env, tmp_path):
    only_worker_dies(settings, lake_env, tmp_path, "connect")
