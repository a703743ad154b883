"""Every environment key the product reads: its meaning and its default, in one place.

The settings loader refuses to read a key that is not listed here, and the docs test checks
that each one is in ``.env.example`` and the generated settings reference (docs/reference/), so a
new setting cannot go undocumented.
CLI help texts take their defaults from here too.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EnvKey:
    meaning: str
    default: str | None = None


ENV_KEYS: dict[str, EnvKey] = {
    "SOURCE_PG_DSN": EnvKey("Postgres holding the source events table (embedded when unset)"),
    "SOURCE_TABLE": EnvKey("source table, schema-qualified", "public.events"),
    "SOURCE_TABLES": EnvKey("several source tables loaded as one image (one snapshot, one commit): "
                            "comma-separated, each schema.table(time=column, id=column, "
                            "subject=column[.key]) (any option left out: the default) or "
                            "schema.table[:time_column[:id_column]], "
                            "landing as main.<table>; instead of SOURCE_TABLE"),
    "LEAVE_IMAGE": EnvKey("true: load the listed tables although one was last loaded as one image with a "
                          "table not listed, leaving that image on purpose (once is enough: the commit "
                          "makes the listed tables the image)", "false"),
    "DUCKLAKE_CATALOG": EnvKey("catalog database: postgresql://…, key=value, sqlite:PATH or duckdb:PATH "
                               "(embedded when neither it nor SOURCE_PG_DSN is set; beside a source of your "
                               "own, embedded only as DUCKLAKE_CATALOG=embedded)"),
    "DUCKLAKE_CATALOG_READER": EnvKey("a Postgres catalog read by a role that can only read it, for "
                                      "read-only --sql: postgresql://lake_reader:…@<catalog's host>/<its "
                                      "database> (doctor prints the GRANTs; the embedded default has its "
                                      "own)"),
    "DUCKLAKE_DATA_PATH": EnvKey("where DuckLake writes Parquet data files (folder or s3://…)",
                                 "<EVENT_LAKE_HOME>/data/<DUCKLAKE_NAME>/"),
    "DUCKLAKE_NAME": EnvKey("attach alias and metadata schema of the lake", "lake"),
    "STAGING_PATH": EnvKey("folder for staged batches", "<EVENT_LAKE_HOME>/staging"),
    "STAGING_WRITER": EnvKey("who writes the staged Parquet: executors (STAGING_PATH shared with every "
                             "worker) or driver (the driver fetches the window as Arrow, in time chunks)",
                             "executors"),
    "PROMOTION": EnvKey("how a staged batch enters the lake: zero-copy (Spark writes the lake's Parquet "
                        "files, promotion registers them) or copy (promotion rewrites the staged rows); "
                        "a lake's id and details types follow the mode it was created with",
                        "zero-copy"),
    "SPARK_MASTER": EnvKey("Spark master URL", "local[*]"),
    "SPARK_REMOTE": EnvKey("Spark Connect URL sc://host:15002 (overrides SPARK_MASTER)"),
    "SPARK_READER": EnvKey("how Spark reads the source: arrow (Spark schedules time slices; each task "
                           "reads its slice with ADBC in the planner's snapshot and writes the Parquet "
                           "itself; no JDBC jar) or jdbc (Spark's JDBC reader and Parquet writer; needs "
                           "SPARK_JDBC_JAR)", "arrow"),
    "SPARK_JDBC_JAR": EnvKey("path to the Postgres JDBC driver jar (SPARK_READER=jdbc only)",
                             "/usr/share/java/postgresql.jar, then Maven"),
    "SPARK_CONF": EnvKey("any Spark properties, key=value separated by ';' (e.g. spark.executor.memory=4g;"
                         "spark.cores.max=8); --spark-conf adds or overrides one"),
    "SPARK_PARTITIONS": EnvKey("read slices (tasks) per extraction (default: from the rows in the window "
                               "and the cluster's task slots)"),
    "SPARK_EXECUTOR_WAIT": EnvKey("on a cluster (spark://, k8s://, or behind SPARK_REMOTE), how long a load "
                                  "waits while no executor can run its tasks before it is cancelled and "
                                  "fails as temporary, naming the master (0: wait for ever)", "60s"),
    "LOAD_TIMEOUT": EnvKey("how long one Spark extraction may run before it is cancelled and fails as "
                           "temporary, naming this bound (a read stuck behind a lock, a task that never "
                           "returns); a first load of a very large table may need more (0: no bound)",
                           "1h, or LOAD_EVERY when longer"),
    "SPARK_DRIVER_MEMORY": EnvKey("memory of the Spark driver JVM (local mode: all of Spark)", "2g"),
    "SPARK_UI": EnvKey("serve Spark's web UI (true/false)", "false"),
    "SPARK_VERBOSE": EnvKey("print Spark's own log to the terminal instead of <home>/logs/spark.log",
                            "false"),
    "SPARK_CLASS_ARCHIVE": EnvKey("folder where the local Spark driver keeps its JVM class archive (recorded "
                                  "once, then its JVM starts ~3 s faster); off turns it off",
                                  "~/.cache/event-lake/jvm"),
    "SOURCE_TIMEZONE": EnvKey("time zone of naive (timestamp without time zone) source columns, e.g. "
                              "Asia/Tokyo (unset: the source database's own TimeZone setting)"),
    "LOOKBACK": EnvKey("tolerance for late events, e.g. 15m", "15m"),
    "SOURCE_RETENTION": EnvKey("how far back the source keeps its rows, for a source that deletes its own "
                               "old ones (e.g. 30d; at least LOOKBACK): the lake keeps older rows as "
                               "history, and no comparison (--status, --verify, --reconcile, --repair) "
                               "counts them as deleted; 0: the source keeps every row", "0"),
    "BACKFILL_BATCH_ROWS": EnvKey("a history (a first load, a table added to SOURCE_TABLES) is read in "
                                  "parts of about this many rows, each committed with its proof, all in "
                                  "one run; a load killed in between goes on after the last committed "
                                  "part (--status shows how far, and an ETA); 0: all at once",
                                  "5000000"),
    "SUBJECT_KEY": EnvKey("where a table holds the person its rows are about, for --erase: a column "
                          "(user_id) or a path into a JSON column (details.user_id); under SOURCE_TABLES "
                          "table=key pairs, comma-separated (a key alone: every table that names none; "
                          "a table may say its own: SOURCE_TABLES=events(subject=user_id)) (unset: --erase "
                          "is refused)"),
    "TYPED_KEYS": EnvKey("payload keys kept as typed columns beside details, so a query on one "
                         "(details->>'user_id' = ...) reads a column instead of every row's JSON: auto "
                         "(the keys in half of a sample of the source's rows, decided when a table is "
                         "made), none, or keys, comma-separated (one named later is added and its rows "
                         "filled at the next load)", "auto"),
    "ERASURE_KEY": EnvKey("secret key of the keyed hash an erasure receipt holds instead of the value; "
                          "--erase is refused without it (a key the lake held would let anyone who reads "
                          "the lake test guesses); never printed"),
    "SOURCE_ARRIVAL_COLUMN": EnvKey("the source's arrival time (a timestamp the database sets as a row "
                                    "is written, best indexed): a run reads only the rows that arrived "
                                    "since the last load instead of the whole look-back; none turns that "
                                    "off", "created_at"),
    "EVENT_LAKE_HOME": EnvKey("folder of the embedded default (Postgres, data, staging, logs); the "
                              "installed tool's is $XDG_DATA_HOME/event-lake unless ./.lake exists", ".lake"),
    "LOAD_EVERY": EnvKey("scheduler: load interval", "1h"),
    "FOLLOW_EVERY": EnvKey("--follow: a load starts this often (start to start)", "2s"),
    "EXPIRE_EVERY": EnvKey("scheduler: snapshot expiry interval", "1d"),
    "COMPACT_EVERY": EnvKey("scheduler: compaction interval", "1w"),
    "COMPACT_FILES": EnvKey("compact as soon as this many small data files (under 16 MB) wait to be merged, "
                            "after a scheduled load or a --run, whatever COMPACT_EVERY says (a --run every "
                            "minute made ~10k files a week; 0: by COMPACT_EVERY only)", "500"),
    "RETENTION": EnvKey("snapshots younger than this stay available for time travel", "7d"),
    "SCHEMA_CHANGES": EnvKey("what the lake does when a source table's columns change "
                             "(docs/schema-changes.md): evolve (follow an added, renamed or dropped column, "
                             "with the first batch carrying it), freeze (refuse any change by name: the load "
                             "stops before reading, nothing lost) or discard_value (follow renames and "
                             "drops; an added column is not loaded); a table may say its own: "
                             "SOURCE_TABLES=public.orders(schema_changes=freeze)", "evolve"),
    "SCHEMA_DRIFT": EnvKey("the older name of SCHEMA_CHANGES for added columns: add (evolve) or ignore "
                           "(discard_value); SCHEMA_CHANGES wins", None),
    "RECONCILE_EVERY": EnvKey("scheduler: interval of the reconcile job (late events beyond LOOKBACK)", "1d"),
    "RECONCILE_SINCE": EnvKey("how far back --reconcile compares source and lake, hour by hour", "7d"),
    "SQL_MEMORY": EnvKey("memory one --sql session may use (DuckDB sizes: 512MB, 2GB); past it a query "
                         "spills to the session's private temp folder, and one that cannot is stopped with "
                         "a message (--memory sets it for one session)", "2GB"),
    "METRICS_TOKEN": EnvKey("bearer token the web server requires on every path but /healthz (unset: none)"),
    "METRICS_PORT": EnvKey("port of the scheduler's web server (/metrics for Prometheus, /healthz, the "
                           "dashboard at /); also --serve's; 0 turns it off in the scheduler", "8900"),
    "METRICS_HOST": EnvKey("address that web server binds (loopback by default; 0.0.0.0 in a container "
                           "whose port is published)", "127.0.0.1"),
    "S3_ENDPOINT": EnvKey("object storage endpoint host:port (MinIO, R2 …)"),
    "S3_REGION": EnvKey("object storage region"),
    "S3_ACCESS_KEY_ID": EnvKey("object storage key id (unset: the AWS credential chain)"),
    "S3_SECRET_ACCESS_KEY": EnvKey("object storage secret key (never printed)"),
    "S3_URL_STYLE": EnvKey("path (MinIO) or vhost"),
    # a secret from a file (a Docker or Kubernetes secret mounted there) instead of the environment
    **{f"{key}_FILE": EnvKey(f"a file holding {key} (a mounted Docker or Kubernetes secret; instead of "
                             f"{key})")
       for key in ("SOURCE_PG_DSN", "DUCKLAKE_CATALOG", "DUCKLAKE_CATALOG_READER", "S3_SECRET_ACCESS_KEY",
                   "METRICS_TOKEN", "ERASURE_KEY")},
    "S3_USE_SSL": EnvKey("talk https to the endpoint (true/false)"),
    "R2_ACCOUNT_ID": EnvKey("Cloudflare R2 account id, for r2:// data paths"),
}


def default(key: str) -> str:
    """The documented default of ``key`` (for help texts); KeyError for keys without one."""
    value = ENV_KEYS[key].default
    if value is None:
        raise KeyError(f"{key} has no default")
    return value
