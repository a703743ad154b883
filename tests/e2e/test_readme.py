"""The README's promises that need real processes: the demo on a bare machine (no .env, no JDBC
jar) and the compose stack (its documentation checks: tests/unit/test_docs.py)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

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


def _compose_config(secrets_dir: Path) -> subprocess.CompletedProcess[str]:
    import shutil

    import pytest

    if shutil.which("docker-compose") is None:
        pytest.skip("docker-compose (v1) not installed; .ci/run installs it")
    return subprocess.run(["docker-compose", "-f", str(ROOT / "docker-compose.yml"), "--profile", "spark",
                           "--profile", "pipeline", "--profile", "tools", "config"], capture_output=True,
                          text=True, timeout=60, env={**os.environ, "SECRETS_DIR": str(secrets_dir)}, cwd="/")


def _make_secrets(folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", str(ROOT / "docker" / "make-secrets.sh"), str(folder)], capture_output=True,
                          text=True, timeout=60, check=True)


def test_docker_compose_stack_is_valid_pinned_and_wired(tmp_path):
    import yaml

    from pipeline.ops.policy import SHUTDOWN_SECONDS

    _make_secrets(tmp_path / "secrets")
    result = _compose_config(tmp_path / "secrets")
    assert result.returncode == 0, result.stderr
    config = yaml.safe_load(result.stdout)
    services = config["services"]
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
        # no secret in a setting: secrets are mounted files, named by *_FILE keys
        for key, value in (service.get("environment") or {}).items():
            assert not any(word in key for word in ("PASSWORD", "SECRET", "TOKEN", "DSN", "CATALOG")) \
                or key.endswith("_FILE"), f"{name}: {key}={value}"
    # one staging location, at the same path for the driver and every executor
    for name in ("pipeline", "spark-connect", "spark-worker"):
        assert "staging:/staging:rw" in services[name]["volumes"], name
    env = services["pipeline"]["environment"]
    assert env["STAGING_PATH"] == "/staging" and env["SPARK_REMOTE"] == "sc://spark-connect:15002"
    assert env["SOURCE_PG_DSN_FILE"] == "/run/secrets/source_dsn"
    assert "@postgres:5432/" in (tmp_path / "secrets" / "source_dsn").read_text()
    # started in order, kept running, stopped without a kill mid-job
    for name in ("postgres", "minio", "spark-master", "spark-worker", "spark-connect", "pipeline"):
        assert services[name].get("healthcheck", {}).get("test"), name
        assert services[name]["restart"] == "unless-stopped", name
        assert "cpus" in services[name] and "mem_limit" in services[name], name
    assert services["pipeline"]["depends_on"] == {
        "postgres": {"condition": "service_healthy"}, "minio-bucket": {"condition": "service_completed_successfully"},
        "spark-connect": {"condition": "service_healthy"}}
    # the object store runs unprivileged, its volume's folder made its user's in its image
    assert services["minio"]["user"] == "10002:10002"
    assert services["minio"]["build"]["dockerfile"] == "minio.Dockerfile"
    assert "chown 10002:10002 /data" in (ROOT / "docker" / "minio.Dockerfile").read_text()
    grace = services["pipeline"]["stop_grace_period"]
    assert grace.endswith("s") and int(grace[:-1]) >= SHUTDOWN_SECONDS + 10
    assert services["generator"]["healthcheck"] == {"test": ["NONE"]}  # compose's word for disable: true


def test_make_secrets_makes_every_file_compose_mounts_once(tmp_path):
    import yaml

    folder = tmp_path / "secrets"
    first = _make_secrets(folder)
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    mounted = {Path(secret["file"]).name for secret in compose["secrets"].values()}
    assert {p.name for p in folder.iterdir()} == mounted
    values = {p.name: p.read_text() for p in folder.iterdir()}
    assert not any(value in first.stdout for value in values.values())  # said made, never shown
    assert folder.stat().st_mode & 0o777 == 0o700
    # the connection strings carry the passwords Postgres' init gives the roles
    assert values["source_dsn"] == f"postgresql://event_reader:{values['event_reader_password']}@postgres:5432/events"
    assert values["catalog_reader_dsn"].startswith(f"postgresql://lake_reader:{values['lake_reader_password']}@")
    # run again: nothing replaced; a file removed is made again, alone
    (folder / "metrics_token").unlink()
    again = _make_secrets(folder)
    assert again.stdout.strip() == f"made {folder}/metrics_token"
    assert {k: v for k, v in values.items() if k != "metrics_token"} == \
        {p.name: p.read_text() for p in folder.iterdir() if p.name != "metrics_token"}
