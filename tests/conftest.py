"""Fixtures: a real Postgres (TEST_PG_DSN or the machine's 127.0.0.1:5432), one local Spark
session per test run, and a fresh DuckLake (Postgres catalog, data on disk) per test.

Tests live in three tiers, by folder: ``unit`` (pure, no services), ``integration`` (Postgres,
DuckLake and the one shared Spark session, in this process; CLI commands through ``main(argv)``)
and ``e2e`` (real subprocesses: kills, signals, pipes, clusters, Connect, S3, browser, install)."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import secrets
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from pipeline.settings import Settings, load_settings
from pipeline.settings.pgdsn import PgDsn
from tests.spark_services import free_port

ROOT = Path(__file__).resolve().parent.parent
TEST_PG_DSN = os.environ.get("TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")


TIERS = ("unit", "integration", "e2e", "stack")  # the folders under tests/, each a marker (pyproject.toml)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--stack", action="store_true",
                     help="run tests/stack: the compose stack under podman (.ci/stack prepares it)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test with its tier, from the folder it lives in: ``pytest -m "not e2e"`` (or
    ``pytest tests/unit tests/integration``) is the fast tier. The stack tier runs only with
    ``--stack``: it needs images that .ci/stack builds."""
    stack_tests = []
    for item in items:
        # the folder right under tests/ (a tier's tests sit in folders mirroring the package)
        path = Path(str(item.fspath)).resolve()
        relative = path.relative_to(ROOT / "tests") if path.is_relative_to(ROOT / "tests") else path
        tier = relative.parts[0] if len(relative.parts) > 1 else ""
        if tier in TIERS:
            item.add_marker(getattr(pytest.mark, tier))
        if tier == "stack":
            stack_tests.append(item)
    if stack_tests and not config.getoption("--stack"):
        config.hook.pytest_deselected(items=stack_tests)
        items[:] = [item for item in items if item not in stack_tests]


@pytest.fixture(scope="session")
def pg_server() -> PgDsn:
    dsn = PgDsn.parse(TEST_PG_DSN, "TEST_PG_DSN")
    try:
        with psycopg.connect(dsn.conninfo(), connect_timeout=5):
            pass
    except psycopg.OperationalError as exc:
        pytest.exit(f"Tests need a Postgres at {dsn.masked()} (set TEST_PG_DSN): {exc}", 2)
    return dsn


# Empties a database a test gave back: what a new one from template1 holds is the public schema
# (PG 15: owned by pg_database_owner, USAGE for all) and no database-level settings. Backends left
# connected (a dropped DuckDB instance closing late) are ended first, as DROP ... WITH (FORCE) did.
_EMPTY = """
DO $$ DECLARE s text; BEGIN
  PERFORM pg_terminate_backend(pid) FROM pg_stat_activity
    WHERE datname = current_database() AND pid <> pg_backend_pid();
  FOR s IN SELECT nspname FROM pg_namespace WHERE nspname NOT IN ('pg_catalog', 'information_schema')
           AND nspname NOT LIKE 'pg\\_toast%' AND nspname NOT LIKE 'pg\\_temp\\_%' LOOP
    EXECUTE format('DROP SCHEMA %I CASCADE', s);
  END LOOP;
  CREATE SCHEMA public AUTHORIZATION pg_database_owner;
  GRANT USAGE ON SCHEMA public TO PUBLIC;
  COMMENT ON SCHEMA public IS 'standard public schema';
END $$"""


class Databases:
    """Empty test databases for this worker, made ahead on a thread of its own, and emptied for
    the next test when a test gives them back: a pipeline test needs two (source and catalog),
    and CREATE DATABASE plus DROP cost Postgres ~90 ms of CPU each time where emptying one costs
    ~10 ms (the suite's largest share of Postgres' CPU, on a 2-core machine). A database that
    cannot be emptied is dropped instead. The session drops them all at its end."""

    AHEAD = 4  # two tests' worth

    def __init__(self, server: PgDsn) -> None:
        self.server = server
        self._ready: list[str] = []
        self._to_empty: list[str] = []
        self._to_drop: list[str] = []
        self._closing = False
        self._failure: BaseException | None = None
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._work, name="test-databases", daemon=True)
        self._thread.start()

    def take(self) -> PgDsn:
        """An empty database: new (from template1), or one an earlier test gave back, emptied."""
        with self._changed:
            if not self._changed.wait_for(lambda: self._ready or self._failure, timeout=120):
                raise TimeoutError(f"no test database made in 120 s on {self.server.masked()}")
            if self._failure is not None:
                raise RuntimeError("could not create a test database") from self._failure
            name = self._ready.pop(0)
            self._changed.notify_all()  # make the next one
        return self.server.with_dbname(name)

    def give_back(self, name: str) -> None:
        with self._changed:
            self._to_empty.append(name)
            self._changed.notify_all()

    def close(self) -> None:
        """Drop every database this worker holds, ready or given back; wait for the last drop."""
        with self._changed:
            self._to_drop += self._ready + self._to_empty
            self._ready.clear()
            self._to_empty.clear()
            self._closing = True
            self._changed.notify_all()
        self._thread.join(timeout=300)

    def _next(self) -> tuple[str, str] | None:
        with self._changed:
            self._changed.wait_for(lambda: self._to_drop or self._to_empty or self._closing or (
                len(self._ready) < self.AHEAD and self._failure is None))
            if self._closing:  # a database made while closing began (it left one per worker behind)
                self._to_drop += self._ready + self._to_empty
                self._ready.clear()
                self._to_empty.clear()
            if self._to_drop:
                return "drop", self._to_drop.pop(0)
            if self._to_empty:
                return "empty", self._to_empty.pop(0)
            if self._closing:
                return None
            return "create", f"el_test_{secrets.token_hex(4)}"

    def _work(self) -> None:
        while (task := self._next()) is not None:
            action, name = task
            try:
                if action == "empty":
                    with psycopg.connect(self.server.with_dbname(name).conninfo(), autocommit=True) as conn:
                        conn.execute("SET lock_timeout = '20s'")
                        conn.execute(_EMPTY)
                        conn.execute(f'ALTER DATABASE "{name}" RESET ALL')
                else:
                    with psycopg.connect(self.server.conninfo(), autocommit=True) as conn:
                        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)' if action == "drop"
                                     else f'CREATE DATABASE "{name}"')
            except psycopg.Error as exc:
                if action == "empty":  # dropped by its test, or held: a new one takes its place
                    with self._changed:
                        self._to_drop.append(name)
                elif action == "create":  # a failed drop leaves a stray database, no more
                    with self._changed:
                        self._failure = exc
                        self._changed.notify_all()
                continue
            if action != "drop":
                with self._changed:
                    self._ready.append(name)
                    self._changed.notify_all()


@pytest.fixture(scope="session")
def databases(pg_server: PgDsn) -> Iterator[Databases]:
    pool = Databases(pg_server)
    yield pool
    pool.close()


@pytest.fixture(autouse=True)
def lake_instances_dropped() -> Iterator[None]:
    """The lake attaches this process pooled (:mod:`pipeline.lake.instances`) end with the test:
    its databases are emptied behind it, and the next test attaches its own lakes."""
    yield
    from pipeline.lake import instances

    instances.drop_all()


@pytest.fixture
def promotion() -> str:
    """PROMOTION of the lake fixtures; a test picks others with ``BOTH_MODES`` or ``COPY_MODE``."""
    return "zero-copy"


# the correctness tests run in both promotion modes; tests of the staged rows' own handling
# (files in the batch folder, quarantine of duplicates) use copy mode, where every row is staged
BOTH_MODES = pytest.mark.parametrize("promotion", ["zero-copy", "copy"])
COPY_MODE = pytest.mark.parametrize("promotion", ["copy"])


@contextlib.contextmanager
def _lake_envs(databases: Databases, root: Path, promotion: str) -> Iterator[Callable[[str], dict[str, str]]]:
    """Makes environments for isolated pipelines: each has its own source DB, catalog DB, data
    and staging under ``root/<name>``; the databases are given back (emptied for the next test)
    when the block ends."""
    made: list[str] = []

    def make(name: str) -> dict[str, str]:
        source, catalog = databases.take(), databases.take()
        made.extend([source.dbname, catalog.dbname])
        folder = root / name
        return {
            "SOURCE_PG_DSN": source.conninfo(),
            "DUCKLAKE_CATALOG": catalog.conninfo(),
            "DUCKLAKE_DATA_PATH": str(folder / "data") + "/",
            "STAGING_PATH": str(folder / "staging"),
            "EVENT_LAKE_HOME": str(folder / "home"),
            "LOOKBACK": "15m",
            "PROMOTION": promotion,
        }

    try:
        yield make
    finally:
        for name in made:
            databases.give_back(name)


@pytest.fixture
def new_lake_env(databases: Databases, tmp_path: Path,
                 promotion: str) -> Iterator[Callable[[str], dict[str, str]]]:
    """:func:`_lake_envs` under ``tmp_path``, for one test."""
    with _lake_envs(databases, tmp_path, promotion) as make:
        yield make


@pytest.fixture(scope="module")
def shared_lake_env(databases: Databases,
                    tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str], dict[str, str]]]:
    """:func:`_lake_envs` (zero-copy) for a whole module: a history that tests which leave the
    lake as they found it share, made once instead of before each test."""
    with _lake_envs(databases, tmp_path_factory.mktemp("shared-lake"), "zero-copy") as make:
        yield make


@pytest.fixture
def lake_env(new_lake_env: Callable[[str], dict[str, str]]) -> dict[str, str]:
    """Environment for one isolated pipeline: own source DB, catalog DB, data and staging."""
    return new_lake_env("")


@pytest.fixture
def settings(lake_env: dict[str, str]) -> Settings:
    return load_settings(lake_env)


def jdbc_jar() -> str | None:
    """The Postgres JDBC jar the jdbc reader's tests need (CI installs Debian's), or None."""
    from pipeline.extract.spark_session import DEBIAN_JAR

    jar = os.environ.get("SPARK_JDBC_JAR") or DEBIAN_JAR
    return jar if os.path.exists(jar) else None


# the arrow reader (the default) needs no jar; tests of SPARK_READER=jdbc need one
NEEDS_JDBC_JAR = pytest.mark.skipif(jdbc_jar() is None, reason="no Postgres JDBC jar (apt-get install "
                                    "libpostgresql-jdbc-java, or set SPARK_JDBC_JAR): SPARK_READER=jdbc untested")


@functools.cache
def shared_spark():
    """This process's one local Spark session; it carries the JDBC jar when there is one, so
    tests of either reader share it (the arrow reader ignores the jar). Whoever starts Spark
    first in a worker starts this one: a session begun by an in-process command (getOrCreate)
    would lack the jar, and the JDBC tests after it would fail on a missing driver class."""
    import atexit
    import shutil
    import tempfile

    from pipeline.extract.spark_session import build_session

    home = tempfile.mkdtemp(prefix="spark-home-")  # the session's log folder, gone at exit
    atexit.register(shutil.rmtree, home, True)
    env = {"EVENT_LAKE_HOME": home, **({"SPARK_READER": "jdbc"} if jdbc_jar() else {})}
    # maps the machine's JVM class archive when there is one, never records it: a recording is
    # written as the process exits (11 s here), and pytest-xdist kills a worker whose exit takes
    # over 10 s, so every run waited 10 s at its end and left only a partial archive behind
    return build_session(load_settings(env), app_name="event-lake-tests", long_lived=True)


@pytest.fixture(scope="session")
def spark():
    """:func:`shared_spark`, stopped when the session ends."""
    session = shared_spark()
    yield session
    session.stop()


def run_cli(script: str, *args: str, env: dict[str, str] | None = None,
            timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run one of the entry scripts as a user would, in a real subprocess."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("SOURCE_", "DUCKLAKE_"))}
    full_env.update(env or {})
    return subprocess.run([sys.executable, str(ROOT / script), *args], env=full_env, cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


PASSWORD = "p@ss:w/rd%'\" x;"  # every character a DSN, a shell or SQL could trip over


@pytest.fixture(scope="module")
def guarded_pg():
    """A private Postgres that checks :data:`PASSWORD` (scram), with databases src and cat."""
    from tests.private_pg import PrivatePostgres

    server = PrivatePostgres(PASSWORD).init()
    for name in ("src", "cat"):
        server.create_db(name)
    yield server
    server.destroy()


@pytest.fixture(scope="session")
def s3_server():
    """moto in server mode: a real HTTP S3 endpoint on loopback, not an in-process mock."""
    import boto3
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    client = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing")
    client.create_bucket(Bucket="lake-bucket")
    yield port, client
    server.stop()


def run_main(*args: str, env: dict[str, str], cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """Run ``events_pipeline.py`` in this process (``main(argv)``) with ``env`` as its whole
    configuration: no interpreter start, no pyspark or duckdb import, and the process's one
    Spark session (``getOrCreate``) instead of a new JVM per call. Returns a CompletedProcess-like
    result (returncode, stdout, stderr). Use :func:`run_cli` where the process itself is the
    point: signals, kills, broken pipes, the JVM's own output."""
    import contextlib
    import io

    from pipeline.cli.main import main

    if {"--run", "run", "--extract-only", "--demo"} & set(args) and "dlt" not in args:
        shared_spark()  # the command's getOrCreate finds the tests' session, with the jar
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    out, err = io.StringIO(), io.StringIO()
    try:
        for key in list(os.environ):
            if key.startswith(("SOURCE_", "DUCKLAKE_")) or key in ("STAGING_PATH", "EVENT_LAKE_HOME"):
                del os.environ[key]
        os.environ.update(env)
        os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(args))
    finally:  # main() points logging at the redirected stderr: undo that, the environment, and its voice
        from pipeline import actions

        actions.speak(actions.LibraryVoice())
        root.handlers[:], root.level = handlers, level
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())


@pytest.fixture
def cli() -> Callable[..., subprocess.CompletedProcess[str]]:
    """:func:`run_main`, as a fixture."""
    return run_main
