"""Small helpers the pipeline tests share: write events, count snapshots, compare, run a CLI
process and watch its output."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import psycopg

from generators.writer import add_events as write_events
from pipeline.lake import connect as lake
from pipeline.load import verify
from pipeline.settings import Settings, TableSpec
from pipeline.settings.model import Promotion
from pipeline.settings.resolve import resolve
from pipeline.source.arrivals import SKEW_MARGIN
from pipeline.source.connect import connect as source_connection
from tests.conftest import ROOT

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from pipeline.load.report import RunReport
    from pipeline.load.run import RunMode
    from pipeline.storage.folder import Folder


def only_table(settings: Settings) -> TableSpec:
    """The one table of a one-table lake (a test of several names each)."""
    [table] = settings.tables
    return table


def source_db(settings: Settings, autocommit: bool = True) -> psycopg.Connection:
    """A connection to the settings' source database (autocommit unless asked otherwise)."""
    return psycopg.connect(resolve(settings).source_dsn.conninfo(), autocommit=autocommit)


def write_payloads(settings: Settings, rows: list[tuple[str, str | None]], *, ago: timedelta,
                   table: str = "public.events") -> None:
    """Rows (event type, details as JSON text; None: SQL NULL) into ``table`` of the events shape
    (made if missing), dated ``ago`` before now, 1 ms apart."""
    import uuid

    now = datetime.now(UTC) - ago
    with source_db(settings) as conn:
        conn.execute(f"CREATE TABLE IF NOT EXISTS {table} (event_id uuid PRIMARY KEY, event_type text NOT NULL, "
                     "event_timestamp timestamptz NOT NULL, details jsonb, created_at timestamptz DEFAULT now())")
        with conn.cursor() as cur:
            cur.executemany(f"INSERT INTO {table} (event_id, event_type, event_timestamp, details) "
                            "VALUES (%s, %s, %s, %s)",
                            [(uuid.uuid4(), kind, now - timedelta(milliseconds=i), details)
                             for i, (kind, details) in enumerate(rows)])


def source_table(settings: Settings) -> str:
    """The one table's source name, ``schema.table``."""
    return only_table(settings).qualified


def events_table(settings: Settings) -> str:
    """The one table's lake name, ``lake.main.<table>``."""
    return settings.lake_table(only_table(settings))


def staging_folder(settings: Settings) -> Folder:
    """Where the one table's batches are staged."""
    from pipeline import staging

    return staging.table_dir(settings, only_table(settings))


def run(settings: Settings, mode: RunMode | str = "run", engine: str = "spark", spark: SparkSession | None = None,
        record_as: str | None = None) -> RunReport:
    """One load as a test makes it: a :class:`~pipeline.ops.pipeline.Pipeline` made for it and
    closed after. ``spark``: the test session's (shared by the tests of a worker), never stopped here."""
    from pipeline.ops.pipeline import Pipeline

    with Pipeline(settings, engine=engine, spark=spark) as pipeline:
        return pipeline.run(mode, record_as=record_as)


def add_events(settings: Settings, rows: int, seed: int, *, late_by: timedelta | None = None,
               now: datetime | None = None) -> int:
    """Write ``rows`` events to the source, and return once they count as arrived for any plan
    made from now on: :data:`SKEW_MARGIN` after their ``created_at`` (the write's transaction
    start). A plan closer to the write than that rightly reads them again at the next load
    (deduplicated), which made tests' exact read counts depend on how soon the run after them
    started: a flake that came with faster runs."""
    settings = resolve(settings)
    table = source_table(settings)
    written = write_events(settings.source_dsn, table, rows, seed, late_by=late_by, now=now)
    with source_connection(settings.source_dsn) as conn:
        [[age]] = conn.execute("SELECT extract(epoch FROM clock_timestamp() - max(created_at)) "
                               f"FROM {table}").fetchall()
    time.sleep(max(0.0, SKEW_MARGIN.total_seconds() - float(age or 0)))
    return written


def without_jdbc_jar(command: list[str]) -> list[str]:
    """``command`` run where ``/usr/share/java`` (Debian's JDBC jar) is an empty folder, as on a
    machine with Java and nothing else; as it is when this user cannot make a mount namespace."""
    import shutil

    if os.geteuid() != 0 or shutil.which("unshare") is None or not os.path.isdir("/usr/share/java"):
        return command
    inner = "mount -t tmpfs none /usr/share/java && exec " + " ".join(f"'{part}'" for part in command)
    return ["unshare", "-m", "--propagation", "private", "sh", "-c", inner]


def full_cycle(settings: Settings) -> None:
    """Load, rerun, late events; then time travel back to the first load (dlt engine: no JVM)."""
    add_events(settings, 400, seed=1)
    [first] = run(settings, engine="dlt").snapshots
    assert run(settings, engine="dlt").rows_inserted == 0
    add_events(settings, 50, seed=2, late_by=timedelta(minutes=5))
    assert run(settings, engine="dlt").rows_inserted == 50
    assert lake_query(settings, f"SELECT count(*) FROM lake.main.events AT (VERSION => {first})")[0][0] == 400
    assert_lake_equals_source(settings, expected_rows=450)


def snapshot_ids(settings: Settings) -> list[int]:
    return [r[0] for r in lake_query(settings, f"SELECT snapshot_id FROM {settings.lake_name}.snapshots() ORDER BY 1")]


def data_snapshots(settings: Settings) -> list[int]:
    """Snapshots that inserted into the events table."""
    return [r[0] for r in lake_query(settings, f"SELECT snapshot_id FROM {settings.lake_name}.snapshots() "
                                               "WHERE changes['tables_inserted_into'] IS NOT NULL ORDER BY 1")]


def assert_lake_equals_source(settings: Settings, expected_rows: int | dict[str, int] | None = None) -> None:
    """Every table of the lake equals its source; ``expected_rows``: the one table's rows, or each
    table's by name."""
    comparison = verify.compare(resolve(settings))
    assert comparison.equal, comparison.describe()
    if expected_rows is not None:
        expected = (expected_rows if isinstance(expected_rows, dict)
                    else {only_table(settings).name: expected_rows})
        assert {name: c.lake.rows for name, c in comparison.tables.items()} == expected, comparison.describe()


class TcpProxy:
    """A loopback TCP forwarder that can be taken down and brought back, to make a real
    server "briefly unreachable" for the process under test."""

    def __init__(self, target_host: str, target_port: int) -> None:
        import socket

        self.target = (target_host, target_port)
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        self.port = probe.getsockname()[1]
        probe.close()
        self._server = None
        self._conns: list = []
        self._admit: int | None = None  # stop(admit=n): connections still let through
        self.accepted = 0  # connections let through so far (what a client opens, counted)

    def start(self) -> None:
        import socket
        import threading

        server = socket.socket()
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", self.port))
        server.listen(64)
        self._server = server
        threading.Thread(target=self._accept, args=(server,), daemon=True).start()

    def _accept(self, server) -> None:
        import socket
        import threading

        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            self._conns += [client, upstream]
            self.accepted += 1
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()
            if self._admit is not None:
                self._admit -= 1
                if self._admit == 0:
                    self._close_listener()

    @staticmethod
    def _pipe(src, dst) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.close()

    def stop(self, admit: int = 0) -> None:
        """Cut the open connections and refuse new ones; ``admit``: let that many more through
        first (a server lost while its client is between two connections)."""
        if admit:
            self._admit = admit
        else:
            self._close_listener()
        self.cut()

    def _close_listener(self) -> None:
        import socket

        self._admit = None
        if self._server is not None:
            # shut down first: a close alone leaves the accept() blocked in another thread
            # listening on Linux, and the next connection would still get through
            with contextlib.suppress(OSError):
                self._server.shutdown(socket.SHUT_RDWR)
            self._server.close()
            self._server = None

    def cut(self) -> None:
        """Cut the open connections; new ones still get through (a server that restarted)."""
        import socket

        for conn in self._conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
                conn.close()
            except OSError:
                pass
        self._conns.clear()


def catalog_through_proxy(env: dict[str, str]) -> tuple[TcpProxy, dict[str, str]]:
    """A started :class:`TcpProxy` in front of ``env``'s catalog, and ``env`` with DUCKLAKE_CATALOG
    pointing through it (the proxy's ``stop``/``start`` take the catalog away and bring it back)."""
    from pipeline.settings.pgdsn import PgDsn

    catalog = PgDsn.parse(env["DUCKLAKE_CATALOG"])
    proxy = TcpProxy(catalog.host, catalog.port)
    proxy.start()
    url = f"postgresql://{catalog.user}@127.0.0.1:{proxy.port}/{catalog.dbname}"
    return proxy, {**env, "DUCKLAKE_CATALOG": url}


def files_registered(settings: Settings) -> int:
    """Spark-written files the lake registered as they were (zero-copy promotions)."""
    return sum(batch["files_registered"] for info in commit_infos(settings, "tables")
               for batch in info["tables"].values())


def commit_infos(settings: Settings, key: str) -> list[dict]:
    """The extra info of every snapshot whose commit recorded ``key``, oldest first."""
    return [json.loads(info) for (info,) in lake_query(
        settings, f"SELECT commit_extra_info FROM {settings.lake_name}.snapshots() "
                  "WHERE json_exists(commit_extra_info, ?) ORDER BY snapshot_id", [f"$.{key}"])]


def assert_promoted_by_mode(settings: Settings) -> None:
    """Zero-copy mode registered Spark's files; copy mode rewrote every row."""
    registered = files_registered(settings)
    assert (registered > 0) == (settings.promotion is Promotion.ZERO_COPY), (settings.promotion, registered)


def jobs_table(settings: Settings) -> str:
    """The job history table (in the catalog database, the lake's metadata schema: Postgres here)."""
    return f"__ducklake_metadata_{settings.lake_name}.{settings.lake_name}.event_lake_jobs"


def age_load_history(settings: Settings, by: timedelta) -> None:
    """Move every recorded job and promoted batch ``by`` into the past: time passing for the
    health checks, which judge staleness from these records, without sleeping through it."""
    with lake.lake_session(resolve(settings)) as con:
        ago = f"INTERVAL {int(by.total_seconds())} SECOND"
        con.execute(f"UPDATE {jobs_table(settings)} SET started_at = started_at - {ago}, "
                    f"finished_at = finished_at - {ago}")
        con.execute(f"UPDATE {settings.batches_table} SET promoted_at = promoted_at - {ago}")


# A test's reads go through the product's lake sessions: one read-only attach per lake and
# process (pipeline.lake.instances), dropped after each test by tests/conftest.py.
def lake_query(settings: Settings, sql: str, params: list | None = None) -> list[tuple]:
    with lake.lake_session(resolve(settings), read_only=True) as con:
        return con.execute(sql, params or []).fetchall()


class Proc:
    """A CLI subprocess whose output lines are collected as they arrive."""

    def __init__(self, script: str, *args: str, env: dict[str, str], as_users_start_it: bool = False) -> None:
        """``as_users_start_it``: through ``uv run`` (when the machine has uv), in a process group of
        its own with SIGINT as a terminal leaves it (a test runner's worker may ignore it, and an
        ignored SIGINT is inherited), so :meth:`signal_group` reaches uv and Python as a terminal's
        Ctrl-C, ``timeout`` or systemd's stop does."""
        full_env = {k: v for k, v in os.environ.items() if not k.startswith(("SOURCE_", "DUCKLAKE_"))}
        uv = shutil.which("uv") if as_users_start_it else None
        command = [uv, "run", "--no-sync", script] if uv else [sys.executable, str(ROOT / script)]
        self.popen = subprocess.Popen(
            [*command, *args], cwd=ROOT, env={**full_env, **env}, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, start_new_session=as_users_start_it,
            preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)) if as_users_start_it else None)
        self.lines: list[str] = []
        self.times: list[float] = []  # when each line arrived (time.monotonic)
        self._queue: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.popen.stdout:
            self.times.append(time.monotonic())
            self.lines.append(line.rstrip())
            self._queue.put(line)

    def wait_for(self, text: str, timeout: float = 120, after: int = 0) -> int:
        """Block until a line containing ``text`` appears at index >= ``after``; its index."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for i, line in enumerate(self.lines[after:], start=after):
                if text in line:
                    return i
            time.sleep(0.2)
        raise AssertionError(f"no line with {text!r} in {timeout}s:\n" + "\n".join(self.lines[-40:]))

    def signal_group(self, sig: int) -> None:
        os.killpg(self.popen.pid, sig)

    def terminate(self, timeout: float = 90) -> int:
        self.popen.send_signal(signal.SIGTERM)
        return self.popen.wait(timeout)

    @property
    def output(self) -> str:
        return "\n".join(self.lines)


def http_get(url: str, *, method: str = "GET", headers: dict[str, str] | None = None) -> tuple[int, str]:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def metric_samples(text: str) -> dict[tuple[str, tuple], float]:
    """``{(name, ((label, value), …)): value}`` from a /metrics page, parsed by Prometheus's parser."""
    from prometheus_client.parser import text_string_to_metric_families

    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def wait_for_slow_reads(source_dsn: str, count: int = 1, timeout: float = 180) -> None:
    """Until ``count`` read slices sleep in Postgres (EVENT_LAKE_FAULT=slow-read): the engine's
    job is then surely running on the executors, however long the Spark session took to start."""
    import time

    import psycopg

    deadline = time.monotonic() + timeout
    with psycopg.connect(source_dsn, autocommit=True) as conn:  # one watcher, closed before the outage
        while time.monotonic() < deadline:
            sleeping = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE state = 'active' "
                                    "AND datname = current_database() AND query LIKE '%pg_sleep(%' "
                                    "AND pid <> pg_backend_pid()").fetchone()[0]
            if sleeping >= count:
                return
            time.sleep(0.3)
    raise AssertionError(f"no {count} read slice(s) sleeping in Postgres after {timeout:.0f}s")


def slow_reads_left(source_dsn: str, within: float = 15) -> int:
    """Read slices still sleeping in Postgres once they had ``within`` seconds to be cancelled (0:
    none left; a cancelled extraction left them reading for the rest of their 30 s)."""
    import time

    import psycopg

    deadline = time.monotonic() + within
    with psycopg.connect(source_dsn, autocommit=True) as conn:
        while True:
            left = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE state = 'active' "
                                "AND datname = current_database() AND query LIKE '%pg_sleep(%' "
                                "AND pid <> pg_backend_pid()").fetchone()[0]
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.3)


def promote_batch(resolved, batch):
    """Promote one staged batch in a lake session of its own, as a run does."""
    from pipeline.lake.connect import lake_session
    from pipeline.promote.promotion import promote_together

    with lake_session(resolved, tables=True) as lake:
        table = lake.table_named(batch.manifest.table, batch.manifest.id_column, batch.manifest.time_column)
        [result] = promote_together(batch.manifest.group or batch.batch_id, [(table, batch)])
        return result


def torn_images(env: dict[str, str]) -> list[str]:
    """Every lake snapshot that is not one image: an event without its session, or a session
    without all its events."""
    from generators.events import EVENTS_PER_SESSION
    from pipeline.lake.connect import lake_session
    from pipeline.settings import load_settings

    settings = resolve(load_settings(env))
    torn = []
    with lake_session(settings, read_only=True) as lake:
        name = lake.name
        versions = [v for (v,) in lake.execute(
            f"SELECT snapshot_id FROM {name}.snapshots() ORDER BY 1").fetchall()]
        tables = {t for (t,) in lake.execute(
            "SELECT table_name FROM duckdb_tables() WHERE database_name = ? AND schema_name = 'main'",
            [name]).fetchall()}
        assert {"sessions", "events"} <= tables
        for v in versions:
            at = f"AT (VERSION => {v})"
            try:
                [(orphans, short)] = lake.execute(f"""
                    WITH s AS (SELECT session_id FROM {name}.main.sessions {at}),
                         e AS (SELECT event_id, TRY_CAST(details->>'session_id' AS UUID) AS session
                               FROM {name}.main.events {at})
                    SELECT (SELECT count(*) FROM e ANTI JOIN s ON s.session_id = e.session),
                           (SELECT count(*) FROM (SELECT s.session_id, count(e.event_id) AS n FROM s
                                                  LEFT JOIN e ON e.session = s.session_id GROUP BY 1)
                            WHERE n < {EVENTS_PER_SESSION})""").fetchall()
            except Exception as exc:  # a snapshot before both tables existed holds no rows of either
                if "does not exist" not in str(exc) and "not found" not in str(exc).lower():
                    raise
                continue
            if orphans or short:
                torn.append(f"snapshot {v}: {orphans} event(s) without their session, "
                            f"{short} session(s) without all {EVENTS_PER_SESSION} events")
    return torn
