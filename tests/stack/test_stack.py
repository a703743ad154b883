"""The production stack as users run it: docker-compose.yml up (Postgres, S3, Spark master, worker
and Connect server, the pipeline scheduled), events from the generator's one-shot service, and the
pipeline's own word that the lake holds them (--verify inside its container, /healthz, /metrics
through the published loopback port, the lake's files on the S3 server); the lake survives
`down` + `up`, and a stopped Connect server fails a load plainly and is recovered from.

Run by `.ci/stack` (it installs podman, builds the base image and the images, and serves the
Docker API that docker-compose talks to); `pytest --stack tests/stack`. The stand-ins for the
public Postgres and MinIO images are in tests/stack/compose.offline.yml.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.helpers import http_get, metric_samples
from tests.spark_services import free_port

pytestmark = pytest.mark.stack

COMPOSE_FILES = [ROOT / "docker-compose.yml", ROOT / "tests" / "stack" / "compose.offline.yml"]
PROJECT = "event-lake-stack"


@dataclass
class Stack:
    env_file: Path
    ports: dict[str, int]

    def compose(self, *args: str, timeout: float = 600, check: bool = True,
                profiles: tuple[str, ...] = ("spark", "pipeline")) -> subprocess.CompletedProcess[str]:
        """docker-compose with the stack's files and settings, as README runs it."""
        files = [part for path in COMPOSE_FILES for part in ("-f", str(path))]
        chosen = [part for profile in profiles for part in ("--profile", profile)]
        command = ["docker-compose", "-p", PROJECT, *files, "--env-file", str(self.env_file), *chosen, *args]
        result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
        if check:
            assert result.returncode == 0, f"{' '.join(args)}: {result.stdout[-3000:]}{result.stderr[-3000:]}"
        return result

    def cli(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        """The pipeline's CLI inside its running container."""
        return self.compose("exec", "-T", "pipeline", "python", "events_pipeline.py", *args, timeout=timeout,
                            check=False)

    def wait_for_postgres(self, timeout: float = 180) -> None:
        """Until the new Postgres has run its init scripts and listens (podman runs no
        healthchecks without systemd, so compose cannot wait for `service_healthy`)."""
        deadline = time.monotonic() + timeout
        while self.compose("exec", "-T", "postgres", "pg_isready", "-h", "127.0.0.1", "-U", "postgres",
                           check=False, profiles=()).returncode != 0:
            assert time.monotonic() < deadline, self.logs("postgres")[-3000:]
            time.sleep(2)

    def generate(self, rows: int) -> None:
        self.compose("run", "--rm", "generator", "--rows", str(rows), "--workers", "1")

    def metrics(self) -> dict:
        code, text = http_get(f"http://127.0.0.1:{self.ports['PIPELINE_PORT']}/metrics")
        assert code == 200, text
        return metric_samples(text)

    def lake_rows(self) -> float:
        try:
            return self.metrics().get(("event_lake_lake_rows", ()), 0.0)
        except (AssertionError, OSError):
            return 0.0  # the pipeline is starting

    def wait_for_rows(self, rows: int, timeout: float = 600) -> None:
        deadline = time.monotonic() + timeout
        while self.lake_rows() < rows:
            assert time.monotonic() < deadline, self.logs("pipeline")[-4000:]
            time.sleep(3)
        assert self.lake_rows() == rows

    def logs(self, service: str) -> str:
        result = self.compose("logs", "--no-color", service, check=False)
        return result.stdout + result.stderr

    def snapshot_ids(self) -> list[int]:
        result = self.cli("--snapshots", "--format", "jsonl")
        assert result.returncode == 0, result.stdout + result.stderr
        return [json.loads(line)["snapshot_id"] for line in result.stdout.splitlines()]


@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> Iterator[Stack]:
    if shutil.which("docker-compose") is None or not os.environ.get("DOCKER_HOST"):
        pytest.fail("the stack tier needs docker-compose and a Docker API (DOCKER_HOST): run .ci/stack")
    base = os.environ.get("BASE_IMAGE")
    assert base, "BASE_IMAGE: the local Debian image the stand-ins build on (.ci/stack sets it)"
    ports = {name: free_port() for name in ("POSTGRES_PORT", "S3_PORT", "SPARK_UI_PORT", "CONNECT_PORT",
                                            "PIPELINE_PORT")}
    settings = {"BASE_IMAGE": base, "LOAD_EVERY": "10s", **{k: str(v) for k, v in ports.items()},
                **{name: secrets.token_hex(12) for name in ("POSTGRES_PASSWORD", "EVENTS_PASSWORD",
                                                            "LAKE_PASSWORD", "MINIO_ROOT_PASSWORD")}}
    env_file = tmp_path_factory.mktemp("stack") / ".env"
    env_file.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    stack = Stack(env_file, ports)
    stack.compose("down", "-v", "--remove-orphans", check=False)  # what an interrupted run left
    try:
        # README's order: the services, the source table (the generator stands for the
        # application), then Spark and the scheduled pipeline
        stack.compose("up", "-d", "postgres", "minio", "minio-bucket", profiles=(), timeout=900)
        stack.wait_for_postgres()
        stack.generate(3_000)
        stack.compose("up", "-d", timeout=900)
        yield stack
    finally:
        print(stack.logs("pipeline")[-6000:])
        stack.compose("down", "-v", "--remove-orphans", check=False)


def test_events_generated_in_the_stack_reach_the_lake_on_s3(stack):
    stack.wait_for_rows(3_000)
    verify = stack.cli("--verify")
    assert verify.returncode == 0 and "lake == source" in verify.stdout + verify.stderr, verify.stderr
    code, body = http_get(f"http://127.0.0.1:{stack.ports['PIPELINE_PORT']}/healthz")
    assert code == 200, body
    assert stack.metrics()[("event_lake_up", ())] == 1.0
    # the executors (the worker's Python workers, in the Spark image) can run the arrow reader
    doctor = stack.cli("--doctor")
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert "FAIL" not in doctor.stdout
    # the lake's files are on the S3 server, read through its published port
    import boto3

    s3 = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{stack.ports['S3_PORT']}",
                      aws_access_key_id="minio", aws_secret_access_key="x", region_name="us-east-1")
    keys = [item["Key"] for item in s3.list_objects_v2(Bucket="lake", Prefix="events/").get("Contents", [])]
    assert any(key.endswith(".parquet") for key in keys), keys


def test_the_lake_outlives_down_and_up_and_grows(stack):
    before = stack.snapshot_ids()
    assert before
    stack.compose("down", timeout=300)  # volumes kept, as a user's `docker compose down`
    stack.compose("up", "-d", timeout=900)
    stack.wait_for_rows(3_000)
    assert stack.snapshot_ids()[: len(before)] == before
    stack.generate(1_000)
    stack.wait_for_rows(4_000)
    after = stack.snapshot_ids()
    assert after[: len(before)] == before and len(after) > len(before)
    assert stack.cli("--verify").returncode == 0


def test_a_stopped_connect_server_fails_a_load_plainly_and_is_recovered_from(stack):
    seen = len(stack.logs("pipeline").splitlines())
    stack.compose("stop", "spark-connect", timeout=120)
    stack.generate(500)
    deadline = time.monotonic() + 300
    spark_said = ("Lost the Spark Connect server at SPARK_REMOTE=sc://spark-connect:15002",
                  "Cannot reach Spark at SPARK_REMOTE=sc://spark-connect:15002")
    while True:
        lines = stack.logs("pipeline").splitlines()[seen:]  # what it logged since the stop
        failed = [line for line in lines if "job load failed" in line]
        if any(said in line for line in failed for said in spark_said):
            break
        assert time.monotonic() < deadline, "\n".join(lines[-40:])
        time.sleep(3)
    # every failure meanwhile is temporary (podman's network DNS may fail once as a container
    # stops: that is retried too), and none is a crash
    assert all("(temporary;" in line for line in failed), failed
    assert not [line for line in lines if "unexpected error" in line or "Traceback" in line]
    stack.compose("start", "spark-connect", timeout=120)
    stack.wait_for_rows(4_500)
    assert stack.cli("--verify").returncode == 0
