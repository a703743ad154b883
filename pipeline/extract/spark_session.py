"""Create the Spark session the extractor uses: quiet, UTC, with the Postgres JDBC driver only for
``SPARK_READER=jdbc`` (the arrow reader needs none).

PySpark is imported lazily so that ``--help``, ``--status`` and SQL commands start fast.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from pipeline import actions
from pipeline.errors import ConfigError, EngineUnavailable, TerminalError, first_line, scrub_secrets
from pipeline.extract import class_archive
from pipeline.extract.spark_s3a import s3a_conf
from pipeline.process import reclaim_signals
from pipeline.settings import Settings
from pipeline.settings.model import Reader
from pipeline.settings.platform import java_binary

if TYPE_CHECKING:
    from types import ModuleType

    from pyspark import SparkContext
    from pyspark.sql import SparkSession

DEBIAN_JAR = "/usr/share/java/postgresql.jar"
MAVEN_COORDINATE = "org.postgresql:postgresql:42.7.4"
LOG4J_CONFIG = Path(__file__).with_name("log4j2.properties")

# Session settings the extractor relies on: instants in UTC, Parquet timestamps in microseconds
# (what DuckDB reads as TIMESTAMPTZ). A classic session gets them at build time; a Connect
# session, whose server was started by someone else, gets them set (and checked) at runtime.
SESSION_CONF = {"spark.sql.session.timeZone": "UTC",
                "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS"}

# A long-lived scheduler's JVM grew within each lifetime (470 -> 1,038 MiB in 150 s; 385 -> 1,768 MiB
# in 200 s): G1 keeps the heap it once grew to. Give memory back when idle (periodic GC, low free
# ratios) and cap what lives outside the heap (class metadata, compiled code, direct buffers), so
# the driver's RSS stays near its live data, bounded by SPARK_DRIVER_MEMORY plus these caps.
DRIVER_JVM_BOUNDS = ("-XX:+UseG1GC -XX:G1PeriodicGCInterval=30000 -XX:MinHeapFreeRatio=10 "
                     "-XX:MaxHeapFreeRatio=30 -XX:MaxMetaspaceSize=512m -XX:ReservedCodeCacheSize=192m "
                     "-XX:MaxDirectMemorySize=512m")
# The driver JVM plans and schedules; with the arrow reader it moves no rows at all. C2's optimized
# code does not pay back its compile time within a run: with C1 alone a fresh 1M-event load took
# 14.1 CPU s instead of 18.4 (arrow) and 18.3 instead of 27.0 (jdbc, rows through the JVM) and
# finished sooner (bench/bench_readers.py); the fast test tier's two JVMs spent 38 CPU s, then ~16.
DRIVER_JIT = "-XX:TieredStopAtLevel=1"


@dataclass(frozen=True)
class JdbcDriver:
    """How Spark gets the driver: a local jar (``spark.jars``) or Maven (``spark.jars.packages``)."""

    conf_key: str
    value: str

    def describe(self) -> str:
        return f"{self.value} (via {self.conf_key})"


def resolve_jdbc_driver(explicit: str | None, exists: Callable[[str], bool] = os.path.exists
                        ) -> JdbcDriver:
    """SPARK_JDBC_JAR, then Debian's jar, then the Maven coordinate (needs the internet)."""
    if explicit:
        if not exists(explicit):
            raise ConfigError(f"SPARK_JDBC_JAR points at {explicit}, which does not exist.",
                              f"Fix the path, or unset it to use {DEBIAN_JAR}.")
        return JdbcDriver("spark.jars", explicit)
    if exists(DEBIAN_JAR):
        return JdbcDriver("spark.jars", DEBIAN_JAR)
    return JdbcDriver("spark.jars.packages", MAVEN_COORDINATE)


def driver_help() -> str:
    return (f"Spark needs the Postgres JDBC driver. Looked for: 1) SPARK_JDBC_JAR (unset or "
            f"missing), 2) {DEBIAN_JAR} (apt-get install libpostgresql-jdbc-java), "
            f"3) Maven {MAVEN_COORDINATE} via spark.jars.packages (needs internet access).")


@contextmanager
def _stderr_to(path: Path):
    """Send this process's fd 2 (and so the JVM child's) to ``path`` while the JVM starts."""
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stderr.flush()
    saved = os.dup(2)
    with open(path, "ab") as log:
        os.dup2(log.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def build_session(settings: Settings, app_name: str = "event-lake", *, long_lived: bool = False,
                  fresh: bool = False) -> SparkSession:
    """A Spark session for ``SPARK_REMOTE`` (Spark Connect) or ``SPARK_MASTER`` (default local[*]).
    ``long_lived`` (the scheduler, a test worker): never the process that records the JVM's class
    archive, whose exit waits for it (:mod:`.class_archive`). ``fresh``: under Connect, a server
    session of its own, not the process's cached one (who holds which: :mod:`.spark_lease`)."""
    import pyspark
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    spark = settings.spark
    _refuse_overrides(spark.conf)
    # S3 staging written by the executors: the Hadoop S3A settings (empty otherwise)
    s3a = s3a_conf(settings.staging_path, settings.staging_writer, spark.reader, settings.storage)
    if spark.remote:
        return _connect_session(spark.remote, app_name, {**s3a, **spark.conf}, fresh)
    driver = resolve_jdbc_driver(spark.jdbc_jar) if spark.reader is Reader.JDBC else None
    _require_java()
    if spark.master.startswith("spark://"):
        for master in spark.master.removeprefix("spark://").split(","):  # HA: any master will do
            try:
                _probe(f"spark://{master}", "SPARK_MASTER", 7077)
                break
            except EngineUnavailable as exc:
                unreachable = exc
        else:
            raise unreachable
    verbose = spark.verbose
    # a user's own spark.driver.extraJavaOptions (SPARK_CONF) replaces ours: no archive then; nor
    # when this process runs a session already (getOrCreate returns it, started with its options)
    running = SparkContext._active_spark_context is not None
    folder = None if running or "spark.driver.extraJavaOptions" in spark.conf else spark.class_archive
    archive = class_archive.driver_options(folder, java_binary(), pyspark.__version__,
                                           may_record=not long_lived)
    log_file = settings.home / "logs" / "spark.log"
    # the JVM's own messages go to stderr, not into a run's stdout (a fatal error's header does not
    # follow this flag: see class_archive.MAP), and a crash report beside Spark's log, not into the
    # working directory
    java_opts = (f"-Duser.timezone=UTC {DRIVER_JVM_BOUNDS} {DRIVER_JIT} -XX:+DisplayVMOutputToStderr "
                 f"-XX:ErrorFile={log_file.parent}/hs_err_pid%p.log")
    if not verbose:
        java_opts += f" -Dlog4j2.configurationFile=file:{LOG4J_CONFIG}"
    if spark.master.startswith("local"):
        # the JVM child reads this from the environment; local mode never leaves the machine
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.master(spark.master).appName(app_name)
    for key, value in SESSION_CONF.items():
        builder = builder.config(key, value)
    if driver is not None:
        builder = builder.config(driver.conf_key, driver.value)
    # the arrow reader's tasks run Python: pyspark starts the workers with PYSPARK_PYTHON (else
    # "python3" from PATH); this process's own interpreter has the reader's packages.
    # spark.pyspark.python (SPARK_CONF) names the executors' (a cluster on other hosts) and wins
    # over an inherited PYSPARK_PYTHON, as in spark-submit
    if "spark.pyspark.python" in spark.conf:
        workers_python = spark.conf["spark.pyspark.python"]
        os.environ.update(PYSPARK_PYTHON=workers_python)
    else:  # what the child gets: a PYSPARK_PYTHON already set is kept
        workers_python = os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        builder
        .config("spark.ui.enabled", "true" if spark.ui else "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.sources.commitProtocolClass",
                "org.apache.spark.sql.execution.datasources.SQLHadoopMapReduceCommitProtocol")
        .config("spark.driver.extraJavaOptions", f"{java_opts} {archive.options}".strip())
        .config("spark.executor.extraJavaOptions", "-Duser.timezone=UTC")
        .config("spark.driver.memory", spark.driver_memory)
    )
    if spark.master.startswith("local") and workers_python == sys.executable:
        # the workers run this interpreter, which imports this package: a daemon that imports
        # pyspark byte-compiled and forks workers with the task's modules loaded (see the module)
        builder = builder.config("spark.python.daemon.module", "pipeline.extract.worker_daemon")
    for key, value in s3a.items():
        builder = builder.config(f"spark.hadoop.{key}", value)
    for key, value in spark.conf.items():  # SPARK_CONF / --spark-conf: last, so they win
        builder = builder.config(key, value)
    start_log = None if verbose else log_file
    try:
        try:
            session = _started(builder, start_log)
        except Exception:
            if archive.mapped is None:
                raise
            # the archive is to blame only if the JVM fails with it twice (one killed as it started,
            # by an operator or the OOM killer, starts the second time) and then starts without it
            # (a start that fails for another reason, a bad option, a missing jar, fails again
            # without it and keeps the archive)
            try:
                session = _started(builder, start_log)
            except Exception:  # noqa: BLE001  as the first failure: blamed below only if it starts without
                session = _started(builder.config("spark.driver.extraJavaOptions", java_opts), start_log)
                archive.discard()
    except Exception as exc:  # noqa: BLE001  Spark's start fails in many ways (Py4J, Java, ports): each is translated below
        if driver is not None and driver.conf_key == "spark.jars.packages":
            # no jar on this machine and Maven out of reach: no retry brings the jar
            raise ConfigError(f"SPARK_READER=jdbc needs the Postgres JDBC driver, and Spark could not "
                              f"fetch it from Maven ({first_line(exc)}).",
                              f"{driver_help()} Or use the arrow reader (SPARK_READER=arrow, the default), "
                              "which needs no jar.") from None
        # Java and the driver jar were checked above: what is left (memory, ports, a cluster
        # master that is down) may pass, so the scheduler retries with backoff
        raise EngineUnavailable(f"Spark did not start (SPARK_MASTER={spark.master}): {exc}",
                                f"See {log_file}.") from None
    session.sparkContext.setLogLevel("ERROR" if not verbose else "WARN")
    _quiet_accumulator_server(session)
    reclaim_signals()  # the SparkContext put its own SIGINT handler over a long-running command's
    if archive.recording is not None:
        archive.recording.finish_at_exit(session)
    return session


def _started(builder: SparkSession.Builder, log_file: Path | None) -> SparkSession:
    """``builder``'s session, the JVM's start-up output in ``log_file`` (None: the terminal)."""
    if log_file is None:
        _launch_jvm_apart(builder)
        return builder.getOrCreate()
    with _stderr_to(log_file):
        _launch_jvm_apart(builder)
        return builder.getOrCreate()


def _launch_jvm_apart(builder: SparkSession.Builder) -> None:
    """Start the driver JVM in a session of its own, as pyspark would start it but for that: a
    stop signal sent to the command's process group (Ctrl-C in a terminal, ``timeout``,
    systemd) then reaches Python alone, which stops Spark in order — a JVM killed by the same
    SIGTERM mid-shutdown left Py4J tracebacks. It still ends with this process: it exits when
    its stdin (a pipe from here) closes. pyspark reuses a gateway already launched."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    with SparkContext._lock:
        if SparkContext._gateway is not None:
            return
        conf = SparkConf()
        for key, value in builder._options.items():  # what getOrCreate passes to the gateway
            conf.set(key, value)
        # its stdout is our stderr (Spark's log file unless --verbose): a run's stdout is its
        # result alone, and a JVM still writing its class archive after this process exited
        # holds no pipe a caller reads stdout from (`--json | jq` waited for it)
        SparkContext._gateway = launch_gateway(conf, popen_kwargs={"start_new_session": True,
                                                                   "stdout": 2})
        SparkContext._jvm = SparkContext._gateway.jvm


def _probe(url: str, setting: str, default_port: int, timeout: float = 10.0) -> None:
    """Fail fast, in one line, when nothing listens at a Spark endpoint: the Connect client retries
    a refused connection for many minutes, and a classic driver tries a standalone master for
    over a minute before a 44-line Java stack trace."""
    import socket
    from urllib.parse import urlparse

    parsed = urlparse(url.split(";", 1)[0])
    host, port = parsed.hostname or "localhost", parsed.port or default_port
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as exc:
        raise EngineUnavailable(f"Cannot reach Spark at {setting}={url}: {host}:{port} "
                                f"{exc.strerror or exc}.", f"Check {setting} and that the server runs; "
                                "the scheduler retries with backoff.") from None


# Connect client retries: pyspark's default tolerates at least 10 minutes of a server that went
# away (a SIGKILLed server was reported 610 s later, as a lost *source*); these give up in ~25 s
# (0.05 + 0.2 + 0.8 + 3.2 + 10 + 10 s) while the server's port still answers (a server busy or
# restarting its listener), and at once when nothing listens there any more: a killed server
# took ~50 s to report, half of it in the release call pyspark sends after a failed operation
# from a thread the interpreter waits for at exit. A restart takes longer than that anyway: the
# scheduler's next attempt (with backoff) meets the new server.
CONNECT_RETRIES: dict[str, Any] = {"max_retries": 6, "initial_backoff": 50, "backoff_multiplier": 4.0,
                                   "max_backoff": 10_000,
                   "max_server_retry_delay": 10_000}
# what the client's errors say when the server itself is gone (not a failed job on a live server)
_CONNECT_LOST = ("StatusCode.UNAVAILABLE", "_MultiThreadedRendezvous", "SESSION_NOT_FOUND",
                 "INVALID_HANDLE", "RESPONSE_ALREADY_RECEIVED", "Socket closed",
                 "failed to connect to all addresses")


def _bound_retries(session: Any, remote: str) -> None:
    """Bounded client retries, none once the server is gone, and no retrying at exit: pyspark's
    exit handler sends cleanup calls to the server (with the same retries), which kept a process
    whose server was killed alive for 20 minutes. A handler registered later runs first: if the
    server is gone by then, the client is closed and pyspark's handler skips its calls."""
    import atexit
    import warnings

    from pyspark.sql.connect.client.retries import DefaultPolicy

    class WhileListening(DefaultPolicy):
        """pyspark's policy, but a lost connection is retried only while the port answers."""

        def can_retry(self, e: BaseException) -> bool:
            return super().can_retry(e) and _listening(remote)

    client = session.client
    client.set_retry_policies([WhileListening(**CONNECT_RETRIES)])
    # the error that follows says what happened; pyspark's two-line warning only repeats it
    warnings.filterwarnings("ignore", message=r"\[RETRIES_EXCEEDED\]")

    def close_if_gone() -> None:
        if not _listening(remote):
            with contextlib.suppress(Exception):
                client.close()

    atexit.register(close_if_gone)


def _listening(remote: str) -> bool:
    try:
        _probe(remote, "SPARK_REMOTE", 15002, timeout=2.0)
    except EngineUnavailable:
        return False
    return True


def connect_lost(exc: BaseException) -> bool:
    """Did a Spark Connect call fail because the server went away (killed, restarted)?"""
    text = f"{type(exc).__name__}: {exc}"
    return any(marker in text for marker in _CONNECT_LOST)


def connect_lost_error(remote: str, exc: BaseException, during: str) -> EngineUnavailable:
    """The one message for a Connect server that went away: named, temporary, nothing lost."""
    gone = "" if _listening(remote) else "; nothing listens there now"
    return EngineUnavailable(
        f"Lost the Spark Connect server at SPARK_REMOTE={scrub_secrets(remote)} {during} "
        f"({_rpc_reason(exc)}{gone}). Nothing was staged or promoted.",
        "Check that the Connect server runs (it was stopped or restarted); the next run reads "
        "the same window again, so nothing is lost.")


def _rpc_reason(exc: BaseException) -> str:
    """What a gRPC error says, its status and details (``UNAVAILABLE: Socket closed``), found in
    the error or the ones it came from: its own first line is an empty-looking
    ``<_MultiThreadedRendezvous of RPC that terminated with:``. Else the error's first line."""
    seen: BaseException | None = exc
    while seen is not None:
        found = _RPC_STATUS.search(str(seen))
        if found:
            return f"{found['status']}: {scrub_secrets(found['details'] or 'no details')}"
        seen = seen.__cause__ or seen.__context__
    return first_line(scrub_secrets(str(exc)))


_RPC_STATUS = re.compile(r'status = StatusCode\.(?P<status>\w+)\s+details = "(?P<details>[^"]*)"')


def _require_java() -> None:
    from pipeline.settings.platform import JAVA_FIX, java_binary, java_where

    if java_binary() is None:
        raise ConfigError(f"Spark needs Java 17 or newer, and no java was found ({java_where()}).",
                          f"{JAVA_FIX} Or use {actions.ENGINE} dlt, which needs no Java.")


def is_connect(spark: SparkSession) -> bool:
    return type(spark).__module__.startswith("pyspark.sql.connect")


def functions(spark: SparkSession) -> ModuleType:
    """``pyspark.sql.functions`` for ``spark``'s kind: a Connect session needs the Connect
    client's, whatever mode the process is in (it may hold a classic session too)."""
    if is_connect(spark):
        from pyspark.sql.connect import functions as connect_functions
        return connect_functions
    from pyspark.sql import functions as classic_functions
    return classic_functions


def _refuse_overrides(conf: dict[str, str]) -> None:
    clash = {k: v for k, v in conf.items() if k in SESSION_CONF and v != SESSION_CONF[k]}
    if clash:
        raise ConfigError(f"SPARK_CONF/{actions.SPARK_CONF} sets {clash}, which the extractor needs as "
                          f"{ {k: SESSION_CONF[k] for k in clash} } (instants in UTC, microsecond Parquet).",
                          "Remove these entries; every other Spark property passes through.")


def own_session(context: SparkContext) -> SparkSession:
    """A session of its own on the process's running SparkContext (its own SQL settings and
    temporary views), with the settings the extractor needs."""
    from pyspark.sql import SparkSession

    session = (SparkSession.getActiveSession() or SparkSession(context)).newSession()
    for key, value in SESSION_CONF.items():
        session.conf.set(key, value)
    return session


def _connect_session(remote: str, app_name: str, conf: dict[str, str], fresh: bool = False) -> SparkSession:
    # the Connect client's own builder: it does not switch the whole process into Connect mode
    # and works beside a classic session (pyspark's generic builder refuses that)
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    _probe(remote, "SPARK_REMOTE", 15002)
    try:
        builder = ConnectSession.builder.remote(remote).appName(app_name)
        session = builder.create() if fresh else builder.getOrCreate()
        _bound_retries(session, remote)
        for key, value in {**conf, **SESSION_CONF}.items():  # runtime properties only, under Connect
            session.conf.set(key, value)
        wrong = {k: session.conf.get(k) for k in SESSION_CONF if session.conf.get(k) != SESSION_CONF[k]}
    except Exception as exc:  # noqa: BLE001  down or restarting: the next attempt may reach it
        raise EngineUnavailable(f"Cannot reach Spark Connect at SPARK_REMOTE={scrub_secrets(remote)}: "
                                f"{scrub_secrets(str(exc))}",
                                "Check SPARK_REMOTE and that the Connect server runs, or unset it to run "
                                "Spark locally.") from None
    if wrong:
        raise TerminalError(f"The Spark Connect server at {scrub_secrets(remote)} refused the session "
                            f"settings the extractor needs: {wrong} (wanted {SESSION_CONF}).",
                            "Start the Connect server without fixing these settings, or set them to "
                            "the wanted values in its spark-defaults.conf.")
    return cast("SparkSession", session)  # the Connect client's session: the same API


def default_cores(spark: SparkSession) -> int:
    """Task slots of the cluster the session runs on (a Connect session asks the server)."""
    if not is_connect(spark):
        return int(spark.sparkContext.defaultParallelism)
    F = functions(spark)

    # a range without a partition count is split into defaultParallelism partitions
    probe = spark.range(0, 100_000).select(F.spark_partition_id().alias("p")).agg(F.max("p")).first()
    assert probe is not None, "an aggregate has a row"
    return int(probe[0]) + 1


def _quiet_accumulator_server(session: SparkSession) -> None:
    """pyspark's accumulator server prints a traceback to the terminal when the JVM goes away
    mid-job (a killed driver): the run's own error says what happened."""
    server = getattr(session.sparkContext, "_accumulatorServer", None)
    if server is not None:
        server.handle_error = lambda _request, _address: None


def cancel_jobs(spark: SparkSession) -> None:
    """Cancel every running Spark job of this session (shutdown of the scheduler)."""
    with contextlib.suppress(Exception):  # the JVM or the server may already be going away
        if is_connect(spark):
            spark.interruptAll()
        else:
            spark.sparkContext.cancelAllJobs()
