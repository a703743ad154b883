"""Spark's side of object-store staging (pure): the Hadoop S3A settings that make executors
write ``STAGING_PATH=s3://…`` through ``s3a://``, and the error when the cluster lacks S3A.

The values come from the same ``S3_*`` settings the promoter (DuckDB httpfs) and the staging
filesystem (pyarrow) use, so the three always point at the same bucket and endpoint.
"""

from __future__ import annotations

from pipeline import actions
from pipeline.errors import ConfigError
from pipeline.settings.model import Reader, StagingWriter, StorageOptions
from pipeline.storage.object_store import ObjectStore

# hadoop-aws must match the Hadoop inside Spark (pyspark 4.x bundles hadoop-client 3.5.0); it
# brings the AWS SDK v2 bundle along when fetched through spark.jars.packages.
HADOOP_AWS = "org.apache.hadoop:hadoop-aws:3.5.0"


def stages_through_s3a(staging_path: str, writer: StagingWriter, reader: Reader) -> bool:
    """Spark's own writer puts the staging files on object storage (the JDBC reader's executors;
    the arrow reader's tasks write through pyarrow's S3 filesystem and need no Hadoop)."""
    return staging_path.startswith("s3://") and writer is StagingWriter.EXECUTORS and reader is Reader.JDBC


def s3a_conf(staging_path: str, writer: StagingWriter, reader: Reader,
             storage: StorageOptions) -> dict[str, str]:
    """Hadoop properties (``fs.s3a.*``) for the staging bucket; empty unless executors write to S3.

    A classic session passes them as ``spark.hadoop.fs.s3a.*`` at build time; a Spark Connect
    session sets them at runtime (Spark copies session properties into the Hadoop configuration
    of every read and write). Spark's UI redacts the keys (``spark.redaction.regex``).
    """
    if not stages_through_s3a(staging_path, writer, reader):
        return {}
    return ObjectStore(storage).s3a()


def missing_s3a(exc: BaseException, staging_path: str) -> ConfigError | None:
    """The clear error when hadoop-aws is not on the cluster (Hadoop says "Class …S3AFileSystem
    not found", or "No FileSystem for scheme s3a" where fs.s3a.impl is unset)."""
    text = str(exc)
    if "S3AFileSystem not found" not in text and 'No FileSystem for scheme "s3a"' not in text:
        return None
    return ConfigError(
        f"STAGING_PATH={staging_path}: the Spark cluster cannot write s3a:// (hadoop-aws is not "
        "on its classpath). Nothing was staged or promoted.",
        f"Add hadoop-aws to the cluster ({actions.SPARK_CONF} spark.jars.packages={HADOOP_AWS}, "
        "or the jars in "
        "every image's $SPARK_HOME/jars), or set STAGING_WRITER=driver so this process writes the "
        "staging files to S3 itself.")
