"""doctor's Java check: reading Java's version string (pure), and a Spark Connect client (the
pipeline image) that has no Java and needs none."""

from __future__ import annotations

import pytest

from pipeline.ops.doctor import FAIL, SKIP, java_check, java_major


@pytest.mark.parametrize(("text", "major"), [('openjdk version "17.0.12" 2024-07-16', 17),
                                             ('java version "1.8.0_392"', 8),
                                             ('openjdk version "21" 2023-09-19', 21), ("garbage", None)])
def test_java_major_reads_old_and_new_version_strings(text, major):
    assert java_major(text) == major


def test_no_java_fails_a_local_session_and_is_no_failure_for_a_connect_client(tmp_path, monkeypatch):
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))  # a JAVA_HOME with no bin/java: no Java here
    local = java_check()
    assert local.status == FAIL and "no java found (JAVA_HOME=" in local.detail
    remote = java_check("sc://spark-connect:15002")
    assert remote.status == SKIP
    assert "not needed" in remote.detail and "SPARK_REMOTE=sc://spark-connect:15002" in remote.detail
