"""A full disk, for real: staging and the data path on a small tmpfs. The run fails in one
plain temporary line naming the folder, leaves no partial file, sets nothing aside, records
the job as failed; once space is freed the next run loads everything, exactly once."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from pipeline.settings import load_settings
from tests.helpers import add_events, assert_lake_equals_source, lake_query


@contextmanager
def small_disk(path: Path, size: str) -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.strip()}): needs root")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def grow(path: Path) -> None:
    subprocess.run(["mount", "-o", "remount,size=64m", str(path)], check=True)


def files_in(path: Path) -> list[Path]:
    return [p for p in path.rglob("*") if p.is_file()]


@pytest.mark.parametrize("promotion", ["copy"])
def test_staging_on_a_full_disk_fails_plainly_and_leaves_nothing(lake_env, tmp_path, cli):
    with small_disk(tmp_path / "small-staging", "96k") as staging:
        env = {**lake_env, "STAGING_PATH": str(staging)}
        settings = load_settings(env)
        add_events(settings, 4000, seed=1)
        result = cli("--run", env=env)
        assert result.returncode == 1
        assert f"No space left on the disk holding STAGING_PATH={staging}" in result.stderr
        assert "unexpected error" not in result.stderr and "(temporary" in result.stdout
        assert [p for p in files_in(staging) if p.suffix == ".parquet"] == []  # no partial part files
        grow(staging)
        rerun = cli("--run", env=env)
        assert rerun.returncode == 0, rerun.stdout + rerun.stderr
        assert_lake_equals_source(settings, 4000)


@pytest.mark.parametrize("promotion", ["copy"])
def test_a_full_data_path_in_copy_promotion_is_temporary_not_poison(lake_env, tmp_path, cli):
    with small_disk(tmp_path / "small-data", "160k") as data:
        env = {**lake_env, "DUCKLAKE_DATA_PATH": f"{data}/"}
        settings = load_settings(env)
        add_events(settings, 6000, seed=2)
        result = cli("--run", "--engine", "dlt", env=env)
        assert result.returncode == 1
        assert f"No space left on the disk holding DUCKLAKE_DATA_PATH={data}/" in result.stderr
        assert "set aside" not in result.stdout + result.stderr and "(temporary" in result.stdout
        # the insert's half-written file went at once: the disk is not left full
        assert [p for p in files_in(data) if p.suffix == ".parquet"] == []
        status = json.loads(cli("--status", "--json", env=env).stdout)
        assert status["jobs"]["load"]["status"] == "failed" and status["set_aside_batches"] == []
        assert status["staged_batches_waiting"] == 1  # kept staged, promoted by the next run
        grow(data)
        rerun = cli("--run", "--engine", "dlt", env=env)
        assert rerun.returncode == 0, rerun.stdout + rerun.stderr
        assert_lake_equals_source(settings, 6000)
        assert lake_query(settings, "SELECT count(*) FROM lake.ops.batches") == [(1,)]
