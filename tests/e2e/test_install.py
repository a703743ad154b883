"""The installable tool: `uv tool install .` gives `event-lake` and `event-lake-gen`, and
`event-lake doctor` checks a setup, naming each failure with its fix."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_cli


def _env(extra: dict[str, str]) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("SOURCE_", "DUCKLAKE_", "VIRTUAL_ENV", "UV_PROJECT"))}
    return {**base, **extra}


def test_uv_tool_install_gives_working_console_scripts(tmp_path, lake_env):
    """What a user does: install from the checkout, then use the tool from any folder."""
    if shutil.which("uv") is None:
        pytest.skip("uv not on PATH")
    tools = {"UV_TOOL_DIR": str(tmp_path / "tools"), "UV_TOOL_BIN_DIR": str(tmp_path / "bin")}
    # from uv's cache (what `uv sync` put there) first: online, uv revalidates every index page
    # and rebuilds pyspark from its sdist (~30 s of the 2 cores); the index only if that fails
    for mode in (["--offline"], []):
        install = subprocess.run(["uv", "tool", "install", *mode, str(ROOT), "-c", str(ROOT / "constraints.txt")],
                                 env=_env(tools),
                                 capture_output=True, text=True, timeout=600, cwd=tmp_path)
        if install.returncode == 0:
            break
    assert install.returncode == 0, install.stderr
    bin_dir = tmp_path / "bin"
    work = tmp_path / "elsewhere"  # no checkout here: the SQL files must come with the package
    work.mkdir()

    def tool(name: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(bin_dir / name), *args], env=_env(lake_env), capture_output=True,
                              text=True, timeout=300, cwd=work)

    version = tool("event-lake", "--version")
    assert version.returncode == 0 and version.stdout.strip() == "event-lake 0.1.0"
    generated = tool("event-lake-gen", "--rows", "300", "--seed", "3", "--quiet")
    assert generated.returncode == 0, generated.stderr  # created the source table from packaged DDL
    doctor = tool("event-lake", "doctor", "--json")
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    checks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
    assert {name: c["status"] for name, c in checks.items()} == {  # no jar needed, none asked for
        "java": "ok", "duckdb extensions": "ok", "source": "ok", "catalog": "ok", "locations": "ok",
        "spark": "ok", "sql reader": "warn"}  # no DUCKLAKE_CATALOG_READER: the GRANTs are the fix
    assert "GRANT SELECT ON ALL TABLES IN SCHEMA" in checks["sql reader"]["hint"]
    assert "read the source through ADBC" in checks["spark"]["detail"]
    early = tool("event-lake", "--sql-file", "lake_health", "--json")  # a named query, by its name
    assert early.returncode == 1 and "does not exist yet" in json.loads(early.stdout)["error"]
    # the docs an error points at are a file the user has: the tool's own copy, no checkout here
    page, _, section = json.loads(early.stdout)["docs"].partition("#")
    assert Path(page).is_file() and str(ROOT) not in page and f"{{#{section}}}" in Path(page).read_text()
    run = tool("event-lake", "run", "--json")
    assert run.returncode == 0 and json.loads(run.stdout)["rows_inserted"] == 300, run.stderr
    named = tool("event-lake", "--sql-file", "events_by_type_last_hour", "--json")
    assert named.returncode == 0, named.stdout + named.stderr
    counts = json.loads(named.stdout)["result"]["commands"][-1]["rows"]
    assert sum(row["events"] for row in counts) == 300
    # without EVENT_LAKE_HOME the installed tool keeps its folder per user, not in the folder it
    # runs in (it made a .lake and started a Postgres wherever it was run)
    own = {k: v for k, v in _env(lake_env).items() if k not in ("EVENT_LAKE_HOME", "STAGING_PATH")}
    xdg = tmp_path / "xdg"
    homeless = subprocess.run([str(bin_dir / "event-lake"), "run", "--engine", "dlt"], env={**own, "XDG_DATA_HOME": str(xdg)},
                              capture_output=True, text=True, timeout=300, cwd=work)
    assert homeless.returncode == 0, homeless.stderr
    assert not (work / ".lake").exists() and (xdg / "event-lake" / "staging").is_dir()
    assert ".env.example" not in tool("event-lake", "--help").stdout  # the tool has no checkout


def test_doctor_names_every_failure_with_its_fix(lake_env):
    broken = {**lake_env, "JAVA_HOME": "/nonexistent-jdk", "SPARK_JDBC_JAR": "/nowhere/postgresql.jar",
              "SPARK_READER": "jdbc",
              "DUCKLAKE_CATALOG": "postgresql://postgres:s3cret-pw@127.0.0.1:1/ducklake_catalog"}
    result = run_cli("events_pipeline.py", "doctor", "--json", env=broken, timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    report = json.loads(result.stdout)
    checks = {c["name"]: c for c in report["checks"]}
    assert report["status"] == "error"
    assert checks["java"]["status"] == "fail" and "JAVA_HOME" in checks["java"]["hint"]
    assert checks["jdbc driver"]["status"] == "fail"
    assert "/nowhere/postgresql.jar" in checks["jdbc driver"]["detail"]
    assert checks["catalog"]["status"] == "fail" and "DUCKLAKE_CATALOG" in checks["catalog"]["detail"]
    assert checks["source"]["status"] == "warn"  # reachable; the table is not created yet
    assert checks["spark"]["status"] == "skipped"  # no Java: not tried, not failed twice
    assert "s3cret-pw" not in result.stdout + result.stderr


def test_doctor_checks_the_executors_python_not_only_the_drivers(lake_env, tmp_path):
    """Executors whose Python lacks the project's packages (a bare virtualenv here) fail the
    spark check with the interpreter and the fix; the default (this environment) passes."""
    import venv

    bare = tmp_path / "bare"
    venv.EnvBuilder(with_pip=False).create(bare)
    env = {**lake_env, "SPARK_CONF": f"spark.pyspark.python={bare / 'bin' / 'python'}"}
    result = run_cli("events_pipeline.py", "doctor", "--json", env=env, timeout=300)
    assert result.returncode == 1, result.stdout + result.stderr
    spark = {c["name"]: c for c in json.loads(result.stdout)["checks"]}["spark"]
    assert spark["status"] == "fail", spark
    assert "cannot run the arrow reader" in spark["detail"] and "No module named" in spark["detail"], spark
    assert "spark.pyspark.python" in spark["hint"] and "jdbc driver" not in result.stdout
