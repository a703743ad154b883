"""The README's promises that need real processes: the demo on a bare machine (no .env, no JDBC
jar) and the compose stack (its documentation checks: tests/unit/test_docs.py)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys

from pipeline.settings import ENV_KEYS
from tests.conftest import ROOT
from tests.helpers import without_jdbc_jar

README = (ROOT / "README.md").read_text()


def test_demo_runs_on_the_embedded_default_with_no_configuration_and_no_jdbc_jar(tmp_path):
    """`uv run events_pipeline.py --demo` in a fresh folder: embedded Postgres, no .env, and no
    JDBC jar anywhere (the arrow reader needs only Java)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ENV_KEYS and not k.startswith(("SOURCE_", "DUCKLAKE_", "EVENT_LAKE_"))}
    script = str(ROOT / "events_pipeline.py")
    try:
        # a newcomer's first --sql, before any load: the lake does not exist yet (was: the embedded
        # reader role's login refused, "role event_lake_reader does not exist")
        early = subprocess.run([sys.executable, script, "--sql", "SELECT 1"], cwd=tmp_path, env=env,
                               capture_output=True, text=True, timeout=300)
        assert early.returncode == 1 and "does not exist yet" in early.stderr, early.stderr
        assert "role" not in early.stderr and f"docs: {ROOT}/docs/troubleshooting.md#lakenotcreated" in early.stderr
        result = subprocess.run(without_jdbc_jar([sys.executable, script, "--demo"]), cwd=tmp_path, env=env,
                                capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stdout + result.stderr
        assert result.stdout.strip().splitlines()[-1].startswith("Demo complete")
        assert "lake == source" in result.stderr  # the run's log line
        assert (tmp_path / ".lake" / "pg" / "PG_VERSION").exists()
        status = subprocess.run([sys.executable, script, "--status"], cwd=tmp_path, env=env,
                                capture_output=True, text=True, timeout=120)
        assert status.returncode == 0 and "10500 rows" in status.stdout
        # the README's tour, as it is written there, on the lake the demo made
        tour = README[README.index("## A 60-second tour"):]
        tour = tour[tour.index("```sh\n") + 6:tour.index("```", tour.index("```sh\n") + 6)]
        shown = [line.split(" # ", 1)[0].strip().removeprefix("uv run events_pipeline.py ")
                 for line in tour.splitlines() if line.strip()]
        assert len(shown) >= 6
        for command in shown:
            done = subprocess.run([sys.executable, script, *shlex.split(command)], cwd=tmp_path, env=env,
                                  capture_output=True, text=True, timeout=120)
            assert done.returncode == 0, (command, done.stdout[-2000:], done.stderr[-2000:])
        assert "10000" in subprocess.run([sys.executable, script, *shlex.split(shown[2])], cwd=tmp_path, env=env,
                                         capture_output=True, text=True, timeout=120).stdout
        # the embedded server keeps its port across a restart: what --print-attach gave still works
        attach = subprocess.run([sys.executable, script, "--print-attach"], cwd=tmp_path, env=env,
                                capture_output=True, text=True, timeout=120).stdout
        subprocess.run([sys.executable, script, "--stop-embedded"], cwd=tmp_path, env=env, timeout=120)
        again = subprocess.run([sys.executable, script, "--print-attach"], cwd=tmp_path, env=env,
                               capture_output=True, text=True, timeout=120).stdout
        assert "PORT" in attach and again == attach
    finally:
        subprocess.run([sys.executable, script, "--stop-embedded"], cwd=tmp_path, env=env,
                       capture_output=True, timeout=120)


COMPOSE_SECRETS = {"POSTGRES_PASSWORD": "pg-pw", "EVENTS_PASSWORD": "ev-pw", "LAKE_PASSWORD": "lk-pw",
                   "MINIO_ROOT_PASSWORD": "mn-pw"}


def _compose_config(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    import shutil

    import pytest

    if shutil.which("docker-compose") is None:
        pytest.skip("docker-compose (v1) not installed; .ci/run installs it")
    clean = {k: v for k, v in os.environ.items() if k not in COMPOSE_SECRETS}
    return subprocess.run(["docker-compose", "-f", str(ROOT / "docker-compose.yml"), "--profile", "spark",
                           "--profile", "pipeline", "config"], capture_output=True, text=True, timeout=60,
                          env={**clean, **env}, cwd="/")


def test_docker_compose_stack_is_valid_pinned_and_wired():
    import yaml

    result = _compose_config(COMPOSE_SECRETS)
    assert result.returncode == 0, result.stderr
    services = yaml.safe_load(result.stdout)["services"]
    # Spark and the pipeline are one build (uv.lock): the Connect server's Python workers run the
    # arrow reader, so the Spark image carries the pipeline's environment, pyspark included
    spark = [services[name]["build"] for name in ("spark-master", "spark-worker", "spark-connect")]
    assert all(b["dockerfile"] == "docker/Dockerfile" and b["target"] == "spark" for b in spark)
    assert services["pipeline"]["build"]["dockerfile"] == "docker/Dockerfile"
    assert services["pipeline"]["build"]["target"] == "pipeline"
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    assert "uv sync --locked --no-dev" in dockerfile and "PYSPARK_PYTHON=/app/.venv/bin/python" in dockerfile
    for name, service in services.items():
        assert "image" in service and not service["image"].endswith(":latest"), name
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} beyond loopback"
    # one staging location, at the same path for the driver and every executor
    for name in ("pipeline", "spark-connect", "spark-worker"):
        assert "staging:/staging:rw" in services[name]["volumes"], name
    assert services["pipeline"]["environment"]["STAGING_PATH"] == "/staging"
    env = services["pipeline"]["environment"]
    assert "@postgres:5432/" in env["SOURCE_PG_DSN"] and "127.0.0.1" not in env["SOURCE_PG_DSN"]
    assert env["SPARK_REMOTE"] == "sc://spark-connect:15002"


def test_docker_compose_requires_every_password_from_env():
    for missing in COMPOSE_SECRETS:
        result = _compose_config({k: v for k, v in COMPOSE_SECRETS.items() if k != missing})
        assert result.returncode != 0 and missing in result.stderr, (missing, result.stderr)
