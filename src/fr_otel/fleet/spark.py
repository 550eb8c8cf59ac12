"""The fleet views on Spark SQL: the same view text as on DuckDB (``views.view_sql``), over
the same facts files (``ARCHIVE/_fleet``), read by a Spark session in local mode or on a
cluster.

Only the views run here. The facts are each incident's analysis, which stays on DuckDB
(``facts.refresh``): on a cluster they are made where the archive is written, and Spark
reads them from any path its Hadoop file systems know (``s3a://``, ``hdfs://``, a local
folder). Importing this module imports pyspark; nothing else in fr_otel imports it.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.errors import AnalysisException, PySparkException, PySparkRuntimeError
from pyspark.logger import PySparkLogger
from pyspark.sql import SparkSession

from fr_otel.errors import MissingDependencyError
from fr_otel.fleet import facts
from fr_otel.fleet.views import FLEET_VIEWS, Scope, source_sql, view_sql

if TYPE_CHECKING:
    import pyarrow as pa

LOCAL_MASTER = "local[2]"

SESSION_CONF: dict[str, str] = {
    # the facts are small tables: Spark's default of 200 shuffle partitions is all overhead
    "spark.sql.shuffle.partitions": "4",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.memory": "1g",
    # day buckets and any time arithmetic as DuckDB's, which works in UTC
    "spark.sql.session.timeZone": "UTC",
    # overflowing or invalid casts fail, as they do in DuckDB (Spark 4's default, said here)
    "spark.sql.ansi.enabled": "true",
}
"""The session's settings (a cluster's own defaults apply to everything else)."""

_SPARK_TYPES = {"VARCHAR": "STRING", "BIGINT": "BIGINT", "BOOLEAN": "BOOLEAN"}


def facts_schema(table: str) -> str:
    """``table``'s columns (``facts.ROLES``, ``facts.LATENCY``) as a Spark DDL schema."""
    columns = facts.ROLES_COLUMNS if table == facts.ROLES else facts.LATENCY_COLUMNS
    return ", ".join(f"`{name}` {_SPARK_TYPES.get(kind, 'DOUBLE')}" for name, kind in columns)


@contextmanager
def spark_session(
    master: str = LOCAL_MASTER, conf: Mapping[str, str] | None = None
) -> Iterator[SparkSession]:
    """A session of ``master`` (``local[N]``, ``spark://host:7077``, ``yarn``...) with
    ``SESSION_CONF`` and ``conf`` (``spark.jars.packages``, ``spark.hadoop.fs.s3a.*``...),
    stopped on leaving; or the session this process runs already (a notebook's,
    ``spark-submit``'s), which is left running."""
    running = SparkSession.getActiveSession()
    if running is not None:
        yield running
        return
    builder = SparkSession.builder.master(master).appName("fr-otel fleet")
    for key, value in {**SESSION_CONF, **(conf or {})}.items():
        builder = builder.config(key, value)
    try:
        with warnings.catch_warnings():
            # pyspark's check of the pandas version, which these views never use
            warnings.simplefilter("ignore", FutureWarning)
            session = builder.getOrCreate()
    except PySparkRuntimeError as exc:
        if exc.getCondition() != "JAVA_GATEWAY_EXITED":
            raise
        raise MissingDependencyError(
            f"Spark could not start its JVM: it needs Java 17 or later (JAVA_HOME) ({exc})"
        ) from None
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()


def register_fleet_views(
    session: SparkSession, archive: Path | str, scope: Scope | None = None
) -> None:
    """Create ``fleet_roles``, ``fleet_latency_rows`` and every ``FLEET_VIEWS`` view as
    temporary views of ``session`` over the facts in ``archive`` (a local folder or a URL
    such as ``s3a://bucket/archive``), in ``FLEET_VIEWS``' order, from the view files."""
    scope = scope or Scope()
    for table, name in ((facts.ROLES, "fleet_roles"), (facts.LATENCY, "fleet_latency_rows")):
        files = f"{name}_files"
        _facts_frame(session, archive, table).createOrReplaceTempView(files)
        session.sql(source_sql(files, table, scope)).createOrReplaceTempView(name)
    for name in FLEET_VIEWS:
        session.sql(view_sql(name)).createOrReplaceTempView(name)


def _facts_frame(session: SparkSession, archive: Path | str, table: str) -> Any:
    """Every incident's file of ``table``, read with the facts' schema (a column an older
    file lacks reads null), or no rows where the archive has none."""
    schema = facts_schema(table)
    # a local folder as a file: URL, which a cluster whose default file system is HDFS
    # would otherwise look for there
    base = archive.resolve().as_uri() if isinstance(archive, Path) else hadoop_url(archive)
    root = f"{base}/{facts.FLEET_DIR}/{table}"
    reader = (
        session.read.schema(schema)
        # job and incident are columns of the files: no partition discovery of job=/incident=
        .option("recursiveFileLookup", "true")
        .option("pathGlobFilter", f"*{facts.SUFFIX}")
    )
    try:
        return reader.parquet(root)
    except AnalysisException as exc:
        if "PATH_NOT_FOUND" not in str(exc):
            raise
        return session.createDataFrame([], schema)


def hadoop_url(url: str) -> str:
    """``url`` as Hadoop names its file system: ``s3://`` (what AWS's tools and DuckDB
    write) is ``s3a://`` (Hadoop's S3A, from ``hadoop-aws``), the same bucket and key."""
    if url.lower().startswith("s3://"):
        url = "s3a://" + url[len("s3://") :]
    return url.rstrip("/")


QueryError = PySparkException
"""What a query Spark cannot run raises (a mistake in it, a missing table)."""


def quiet_query_errors() -> None:
    """Stop pyspark logging each failed query whole (its plan and the JVM's stack) on
    stderr, for a command that reports the error itself: it raises ``QueryError`` all
    the same."""
    PySparkLogger.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL)


def arrow(session: SparkSession, query: str) -> pa.Table:
    """``query``'s rows as an Arrow table, columns typed as Spark typed them."""
    return session.sql(query).toArrow()


def columns(session: SparkSession, view: str) -> list[str]:
    return list(session.table(view).columns)


def rows(session: SparkSession, query: str) -> list[dict[str, Any]]:
    """``query``'s rows as dicts of plain Python values, as DuckDB's cursor gives them."""
    return [row.asDict() for row in session.sql(query).collect()]
