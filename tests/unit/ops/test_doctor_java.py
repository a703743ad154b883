"""Reading Java's version string (pure)."""

from __future__ import annotations

import pytest

from pipeline.ops.doctor import java_major


@pytest.mark.parametrize(("text", "major"), [('openjdk version "17.0.12" 2024-07-16', 17),
                                             ('java version "1.8.0_392"', 8),
                                             ('openjdk version "21" 2023-09-19', 21), ("garbage", None)])
def test_java_major_reads_old_and_new_version_strings(text, major):
    assert java_major(text) == major
