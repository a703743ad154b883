"""``doctor``: check a setup piece by piece, each failure with the fix.

Java, the JDBC driver, the DuckDB extension wheels, the source, the catalog, the data and
staging locations, and a Spark start that reads the source through JDBC. Every check runs
even when an earlier one failed (a user fixes them all in one go); a check that depends on a
failed one says so instead of failing twice.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import psycopg

from pipeline import actions, invocation
from pipeline.errors import LakeNotCreated, PipelineError, first_line, scrub_secrets
from pipeline.settings import ResolvedSettings, Settings
from pipeline.settings.model import Reader, SparkOptions
from pipeline.sqltext import one_row

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

OK, WARN, FAIL, SKIP = "ok", "warn", "fail", "skipped"
JAVA_MIN = 17  # Spark 4 runs on Java 17 or 21


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # ok, warn (works, but look), fail, skipped (an earlier check failed, or not needed)
    detail: str
    hint: str = ""
    seconds: float = 0.0

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def java_check(remote: str | None = None) -> Check:
    """Java for a Spark session this process starts; with ``remote`` (SPARK_REMOTE) Spark runs on
    the Connect server and a missing Java here is no failure (the pipeline image has none)."""
    from pipeline.settings.platform import JAVA_FIX as fix
    from pipeline.settings.platform import java_binary, java_where

    java = java_binary()
    if java is None and remote:
        return Check("java", SKIP, "not needed: Spark runs on the Connect server "
                     f"(SPARK_REMOTE={scrub_secrets(remote)})")
    if java is None:
        return Check("java", FAIL, f"no java found ({java_where()})", fix)
    try:
        text = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30).stderr
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check("java", FAIL, f"{java} does not run: {exc}", fix)
    major = java_major(text)
    if major is None or major < JAVA_MIN:
        return Check("java", FAIL, f"{java} is {first_line(text) or 'of unknown version'}", fix)
    return Check("java", OK, f"{java}: Java {major}")


def java_major(version_text: str) -> int | None:
    """``openjdk version "17.0.12"`` -> 17; ``java version "1.8.0_392"`` -> 8."""
    match = re.search(r'version "(\d+)(?:\.(\d+))?', version_text)
    if not match:
        return None
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major


def jdbc_check(spark: SparkOptions) -> Check:
    from pipeline.extract.spark_session import driver_help, resolve_jdbc_driver

    if spark.remote:
        return Check("jdbc driver", OK, f"Spark Connect ({spark.shown}): the server's own "
                     "jars (start it with --jars /usr/share/java/postgresql.jar)")
    driver = resolve_jdbc_driver(spark.jdbc_jar)
    if driver.conf_key == "spark.jars.packages":
        return Check("jdbc driver", WARN, f"no local jar: Spark fetches {driver.value} from Maven "
                     "(needs internet access)", driver_help())
    return Check("jdbc driver", OK, driver.value)


class Doctor:
    """The checks that need the settings resolved (the embedded Postgres started if it is the
    default): each a method returning its :class:`Check`."""

    def __init__(self, settings: ResolvedSettings) -> None:
        self.settings = settings

    def extensions(self) -> Check:
        import duckdb

        from pipeline.lake import extensions
        from pipeline.lake.attach_sql import extension_names

        names = extension_names(self.settings.catalog, self.settings.data_path)
        extensions.new_instance(*names).close()  # installed from the wheels and loaded: they work
        return Check("duckdb extensions", OK, f"duckdb {duckdb.__version__}: {', '.join(names)} from the "
                     "pinned wheels")

    def source(self) -> Check:
        """The source: reachable, and each table of the run (SOURCE_TABLES: every one) there, readable,
        shaped as read (its own id and time columns), its arrival column stamped by the database."""
        from pipeline.source import arrivals, shape, stats
        from pipeline.source.connect import connect

        notes: list[tuple[str, str]] = []  # (what, the fix)
        with connect(self.settings.source_dsn) as conn:
            version = one_row(conn.execute("SHOW server_version"))[0]
            settings = self.settings
            for spec in settings.tables:
                table = spec.qualified
                if not stats.table_exists(conn, table):
                    made_by = f"The generator creates it ({invocation.generator_command()})"
                    return Check("source", WARN, f"Postgres {version} reachable; table {table} does not "
                                 "exist yet", made_by + ("." if invocation.installed()
                                                         else ", or create it from sql/source_events.sql."))
                try:
                    stats.require_select(conn, table)
                    relation = shape.SourceRelation.of(conn, spec)
                    shape.check_shape(conn, relation, settings.schema_changes_of(spec.qualified),
                                      settings.arrival_column)
                except PipelineError as exc:  # no SELECT, a missing or retyped column: named, with the fix
                    return Check("source", FAIL, f"Postgres {version}; {first_line(exc)}", exc.hint)
                column = shape.arrival_column_of(relation, settings.arrival_column)
                stamped = arrivals.stamped_by_database(conn, table, column) if column else None
                note = arrivals.arrival_note(column, stamped, 0) if column else None
                if note:
                    notes.append((f"table {table}; {note}",
                                  f"ALTER TABLE {table} ALTER {column} SET DEFAULT now(), or set "
                                  "SOURCE_ARRIVAL_COLUMN=none to read the whole look-back every run without "
                                  "the check"))
        tables = ", ".join(t.qualified for t in self.settings.tables)
        if notes:
            return Check("source", WARN, f"Postgres {version}, " + "; ".join(what for what, _ in notes),
                         "; ".join(fix for _, fix in notes))
        return Check("source", OK, f"Postgres {version}, table{'s' if len(self.settings.tables) > 1 else ''} "
                     f"{tables}")

    def catalog(self) -> Check:
        from pipeline.lake.connect import lake_session

        where = self.settings.catalog.describe()
        try:
            with lake_session(self.settings, read_only=True) as con:
                snapshots = one_row(con.execute(f"SELECT count(*) FROM {con.name}.snapshots()"))[0]
        except LakeNotCreated:
            return Check("catalog", OK, f"{where}: reachable; the lake is created by the first run")
        return Check("catalog", OK, f"{where}: lake {self.settings.lake_name} with {snapshots} snapshot(s)")

    def reader(self) -> Check:
        """Whether a read-only --sql session reaches the catalog as a role that can only read it."""
        from pipeline.sql_session import catalog_reader

        catalog, schema = self.settings.catalog, self.settings.lake_name
        if catalog.pg is None:
            return Check("sql reader", OK,
                         f"a {catalog.kind} catalog file is opened read-only by read-only SQL")
        setup = ("as the catalog's owner run:\n" + catalog_reader.setup_text(catalog, schema) +
                 "\nthen set DUCKLAKE_CATALOG_READER=postgresql://lake_reader:<password>@"
                 f"{catalog.pg.host}:{catalog.pg.port}/{catalog.pg.dbname}")
        if catalog.reader is None:
            return Check("sql reader", WARN, f"read-only {actions.SQL} reaches the catalog as "
                         f"{catalog.pg.user}, who can write it: only the statement check keeps it read-only",
                         setup)
        if catalog.embedded and not catalog_reader.ensure_embedded(catalog, schema):
            return Check("sql reader", OK, f"{catalog.reader.user} is made with the lake (by the first run)")
        try:
            problems = catalog_reader.can_write(catalog.reader, schema)
        except psycopg.Error as exc:
            return Check("sql reader", FAIL, f"cannot log in as {catalog.reader.user}: {first_line(exc)}",
                         "Check DUCKLAKE_CATALOG_READER's user and password; " + setup)
        if problems:
            return Check("sql reader", FAIL, f"{catalog.reader.user} " + "; ".join(problems), setup)
        return Check("sql reader", OK, f"read-only {actions.SQL} reads the catalog as {catalog.reader.user}, "
                     "which can only read it")

    def locations(self) -> Check:
        from pipeline.load.preflight import preflight

        preflight(self.settings, reads_source=False)  # raises, naming the location and the fix
        return Check("locations", OK, f"data {self.settings.data_path} and staging "
                     f"{self.settings.staging_path} take writes")

    def spark(self, source_ok: bool) -> Check:
        from pipeline.extract.spark_engine import connection_options
        from pipeline.extract.spark_lease import SparkLease

        where = self.settings.spark.shown
        # a lease: doctor stops the Spark it started, never a session someone else in this process holds
        lease = SparkLease.take(self.settings, "event-lake-doctor")
        spark = lease.session
        try:
            if self.settings.spark.reader is Reader.ARROW:
                return self._arrow(spark, where, source_ok)
            if not source_ok:
                spark.range(10).count()
                return Check("spark", WARN, f"{where} started; the JDBC read was not tried (source check "
                             "failed)", "Fix the source, then run doctor again.")
            row = (spark.read.format("jdbc").options(**connection_options(self.settings))
                   .option("query", "SELECT 1 AS one").load().first())
            one = row[0] if row is not None else None
        finally:
            lease.release()
        return Check("spark", OK if one == 1 else FAIL, f"{where} started and read the source through JDBC")

    def _arrow(self, spark: SparkSession, where: str, source_ok: bool) -> Check:
        """On the executors, not only here: every one imports the reader's packages, and one reads
        the source as a slice task would."""
        from pipeline.extract import spark_arrow

        facts = spark_arrow.executors(spark)
        problem = spark_arrow.executor_problem(facts)
        if problem:
            return Check("spark", FAIL, f"{where} started, but {problem}", spark_arrow.EXECUTOR_FIX)
        pythons = sorted({str(f["python"]) for f in facts})
        if not source_ok:
            return Check("spark", WARN, f"{where} started, {len(facts)} task slot(s) import the reader "
                         f"({', '.join(pythons)}); the source read was not tried (source check failed)",
                         "Fix the source, then run doctor again.")
        host = spark_arrow.source_from_executor(spark, self.settings.source_dsn)
        return Check("spark", OK, f"{where} started; {len(facts)} task slot(s) import the arrow reader "
                     f"({', '.join(pythons)}); an executor on {host} read the source through ADBC")


def run_checks(settings: Settings, *, with_spark: bool = True) -> list[Check]:
    """Every check, in the order a setup is built; none raises."""
    from pipeline.ops.pipeline import Pipeline

    checks = [_timed("java", lambda: java_check(settings.spark.remote))]
    if settings.spark.reader is Reader.JDBC:  # the arrow reader needs no jar
        checks.append(_timed("jdbc driver", lambda: jdbc_check(settings.spark)))
    try:
        with Pipeline(settings) as pipeline:  # starts the embedded Postgres when nothing is configured
            resolved = pipeline.settings
    except PipelineError as exc:
        failed = _failed("source", exc)
        return [*checks, failed, *(Check(name, SKIP, "needs the settings resolved (see above)")
                                   for name in ("duckdb extensions", "catalog", "sql reader", "locations",
                                                "spark"))]
    doctor = Doctor(resolved)
    checks.append(_timed("duckdb extensions", doctor.extensions))
    checks.append(_timed("source", doctor.source))
    checks.append(_timed("catalog", doctor.catalog))
    checks.append(_timed("sql reader", doctor.reader))
    checks.append(_timed("locations", doctor.locations))
    if with_spark:
        status = {check.name: check.status for check in checks}
        source_ok = status["source"] != FAIL
        if status["java"] == FAIL and not settings.spark.remote:
            checks.append(Check("spark", SKIP, "needs Java (see above)"))
        else:
            checks.append(_timed("spark", lambda: doctor.spark(source_ok)))
    return checks


def _timed(name: str, check: Callable[[], Check]) -> Check:
    start = time.monotonic()
    try:
        result = check()
    except PipelineError as exc:
        result = _failed(name, exc)
    except Exception as exc:  # noqa: BLE001  a check reports, whatever broke
        result = Check(name, FAIL, scrub_secrets(first_line(exc)) or type(exc).__name__,
                       f"Run with {actions.VERBOSE} for Spark's and DuckDB's own output.")
    return Check(result.name, result.status, result.detail, result.hint, round(time.monotonic() - start, 2))


def _failed(name: str, exc: PipelineError) -> Check:
    return Check(name, FAIL, scrub_secrets(first_line(str(exc))), scrub_secrets(exc.hint))
