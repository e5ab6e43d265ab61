"""The Spark session: Delta Lake and the PostgreSQL JDBC driver, resolved from Maven Central.

Jars come through Ivy (`spark.jars.packages`); after the first resolution they are
served from the Ivy cache (~/.ivy2.5.2), so later runs need no network. Under
spark-submit the session already exists and keeps its own master.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from pgcdc.errors import SetupError
from pgcdc.settings import SparkSettings
from pgcdc.spark import logstore, storage

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_log = logging.getLogger(__name__)

POSTGRES_JDBC = "org.postgresql:postgresql:42.7.5"
MIN_JAVA = 17

# Tables in a local folder. Hadoop's local file system, without its native library (pip's
# pyspark has none), starts a `readlink` process for every link-status check and a `chmod`
# process for every file it creates with a permission, ~5 ms each: ~24 per batch (Delta's
# commit file, its checksum file, the state file, a deletion-vector file), ~0.1 s of a 10k-row
# batch. These reach the same files with far fewer: the plain local file system (no Hadoop
# ".crc" side files), Delta's FileSystem-based LogStore for `file:` paths (on a local file
# system Delta's default store also commits by "fail if the version exists, then rename";
# this one also serializes commits within one JVM), and Spark's FileSystem-based
# write-then-rename for Delta's checksum files (this one for every scheme; it is Spark's own
# fallback where a file system has no FileContext). Commits to local tables go through
# pgcdc's log store (pgcdc.spark.logstore), whose put-if-absent holds across processes.
LOCAL_FILES_CONF = {
    "spark.hadoop.fs.file.impl": "org.apache.hadoop.fs.RawLocalFileSystem",
    "spark.sql.streaming.checkpointFileManagerClass":
        "org.apache.spark.sql.execution.streaming.FileSystemBasedCheckpointFileManager",
}

# Small, quiet defaults for a batch job on a laptop-sized machine; settings.spark.conf overrides them.
DEFAULT_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.databricks.delta.snapshotPartitions": "2",
    # VACUUM lists a table's folders in a Spark job of this many tasks (Spark's default, 10000:
    # 28-75 s for a 20-row table on 2 cores; 8: 3-8 s, docs/performance.md); a cluster that
    # vacuums tables of many thousand folders sets it higher
    "spark.sql.sources.parallelPartitionDiscovery.parallelism": "8",
    "spark.sql.session.timeZone": "UTC",
    "spark.driver.memory": "2g",
    "spark.sql.debug.maxToStringFields": "1000",
} | LOCAL_FILES_CONF


def log_conf(user: dict[str, str] | None = None) -> dict[str, str]:
    """The driver JVM's options with pgcdc's log4j2.properties (Spark's log at WARN) before any
    the settings give (a -Dlog4j2.configurationFile of theirs comes later and wins)."""
    from pathlib import Path

    config = Path(__file__).with_name("log4j2.properties").resolve()
    options = " ".join(filter(None, [f"-Dlog4j2.configurationFile=file:{config}",
                                     (user or {}).get("spark.driver.extraJavaOptions")]))
    return {"spark.driver.extraJavaOptions": options}


def packages(target_root: str | None = None) -> str:
    """The Maven coordinates spark-submit needs for this environment's pyspark: Delta for the
    installed delta-spark (built for Scala 2.13 from 4.0 on, 2.12 before), the JDBC driver,
    and what the target root's storage needs (pgcdc.spark.storage). (A session pgcdc starts
    resolves the same through delta's configure_spark_with_delta_pip.)"""
    from importlib.metadata import version

    delta = version("delta-spark")
    scala = "2.13" if int(delta.split(".")[0]) >= 4 else "2.12"
    return ",".join([f"io.delta:delta-spark_{scala}:{delta}", POSTGRES_JDBC, *storage.packages(target_root or "")])


def java_major(java: str | None = None) -> int:
    """Major version of the `java` Spark will use (JAVA_HOME first, then PATH)."""
    home = os.environ.get("JAVA_HOME")
    java = java or (os.path.join(home, "bin", "java") if home else shutil.which("java"))
    if not java or not os.path.exists(java):
        raise SetupError(f"Java {MIN_JAVA}+ not found; install a JDK (e.g. apt-get install openjdk-17-jre-headless) "
                         "or set JAVA_HOME")
    out = subprocess.run([java, "-version"], capture_output=True, text=True).stderr
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if not match:
        raise SetupError(f"cannot read the Java version from `{java} -version`: {out.strip()[:200]}")
    major = int(match.group(1))
    return int(match.group(2)) if major == 1 else major


def check_java() -> None:
    """Fail early with a clear message instead of a Py4J stack trace."""
    major = java_major()
    if major < MIN_JAVA:
        raise SetupError(f"Java {major} found but Spark 4 needs Java {MIN_JAVA}+; install openjdk-17 and set JAVA_HOME")


def get_session(settings: SparkSettings | None = None, app_name: str = "pgcdc",
                target_root: str | None = None) -> "SparkSession":
    """The active session (spark-submit) or a new local one with Delta, the JDBC driver and
    what `target_root`'s storage needs (s3a://: Hadoop's S3A, pgcdc.spark.storage)."""
    from delta import configure_spark_with_delta_pip
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    if "PYSPARK_GATEWAY_PORT" in os.environ:  # under spark-submit: master and jars come from its flags
        session = SparkSession.builder.appName(app_name).getOrCreate()
        if "Delta" not in (session.conf.get("spark.sql.extensions", "") or ""):
            raise SetupError("spark-submit was started without Delta; pass the arguments `pgcdc submit-args` prints "
                             "(packages, jars, the Delta extension)")
        _check_log_store(session)
        _apply_at_runtime(session, (settings or SparkSettings()).conf)
        return session
    check_java()
    settings = settings or SparkSettings()
    builder = SparkSession.builder.master(settings.master).appName(app_name)
    remote = storage.S3A_DEFAULTS if storage.scheme(target_root or "") == "s3a" else {}
    confs = DEFAULT_CONF | remote | _log_store_conf(settings.conf) | settings.conf | log_conf(settings.conf)
    for key, value in confs.items():
        builder = builder.config(key, value)
    builder = configure_spark_with_delta_pip(builder, extra_packages=[POSTGRES_JDBC,
                                                                      *storage.packages(target_root or "")])
    # (the JVM inherits this process's environment, without pgcdc's secrets)
    with _without_secrets(), _jvm_ignores_sigterm():
        session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session


def _apply_at_runtime(session: "SparkSession", conf: dict[str, str]) -> None:
    """Under spark-submit, the [spark] conf of the settings that a running session can still
    take: Hadoop's (`spark.hadoop.*`, e.g. the S3A keys, which stay out of spark-submit's
    command line) and SQL confs. The rest is fixed once spark-submit started: pgcdc says so."""
    hadoop = session.sparkContext._jsc.hadoopConfiguration()
    for key, value in conf.items():
        if key.startswith("spark.hadoop."):
            hadoop.set(key[len("spark.hadoop."):], value)
        elif key.startswith(("spark.sql.", "spark.databricks.")):
            session.conf.set(key, value)
        else:
            _log.warning("[spark] conf %s is ignored under spark-submit (fixed when it starts); pass it as "
                         "--conf %s=...", key, key)


def side_session(spark: "SparkSession", conf: dict[str, str]) -> "SparkSession":
    """A session beside `spark` for work on another thread: the same SparkContext (jars,
    Hadoop's conf, executors) with SQL confs of its own, so what one thread sets around a
    commit (the consumer state's txnAppId and userMetadata) never lands in the other's
    commits. The [spark] conf's SQL confs are set again (spark-submit gives them at run time)."""
    side = spark.newSession()
    for key, value in conf.items():
        if key.startswith(("spark.sql.", "spark.databricks.")) and side.conf.isModifiable(key):
            side.conf.set(key, value)
    return side


def activate(spark: "SparkSession") -> None:
    """Make `spark` the active session of this thread's JVM thread (one per Python thread:
    PySpark's pinned threads). Delta's transactions, which the fast engine commits through,
    read their confs (the consumer state's userMetadata and txnAppId) from the active session,
    not from the one they were opened with: a thread of its own (a lane, sync/runs.py) would
    otherwise commit with the default session's, another table's state."""
    spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)  # type: ignore[union-attr]


def pinned_threads() -> bool:
    """Whether each Python thread has a JVM thread of its own (PySpark's default since 3.2), which
    `activate` needs to keep one thread's active session from another's."""
    return os.environ.get("PYSPARK_PIN_THREAD", "true").lower() == "true"


# Environment variables that hold secrets pgcdc uses on the Python side only (the JVM gets the
# password as a JDBC option of each read, never from its environment)
_SECRET_ENV = re.compile(r"^(PGCDC_SOURCE__.*|PGPASSWORD|PGCDC_.*(PASSWORD|SECRET|DSN|TOKEN).*)$", re.IGNORECASE)


@contextmanager
def _without_secrets() -> Iterator[None]:
    """Hide secret variables from os.environ while the JVM is started."""
    hidden = {k: os.environ.pop(k) for k in list(os.environ) if _SECRET_ENV.match(k)}
    try:
        yield
    finally:
        os.environ.update(hidden)


@contextmanager
def _jvm_ignores_sigterm() -> Iterator[None]:
    """Start the JVM with SIGTERM ignored (a disposition it inherits and then leaves alone), as
    pyspark already does with SIGINT: a SIGTERM to the whole process group (systemd, a
    container's stop) reaches pgcdc alone, which finishes its batch and exits; the JVM then
    ends with it (its stdin closes)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _log_store_conf(user: dict[str, str]) -> dict[str, str]:
    """Confs that make local tables commit through pgcdc's log store (built on first use).
    Without a JDK it cannot be built: Delta's LocalLogStore then serves, safe only while no
    other Spark application commits to the same tables; pgcdc says so."""
    try:
        jar = str(logstore.build())
    except SetupError as exc:
        _log.warning("%s; local tables commit through Delta's LocalLogStore, which is safe only while no other "
                     "Spark application commits to them", exc)
        return {"spark.delta.logStore.file.impl": "org.apache.spark.sql.delta.storage.LocalLogStore"}
    jars = ",".join(filter(None, [user.get("spark.jars"), jar]))
    return {"spark.delta.logStore.file.impl": logstore.CLASS, "spark.jars": jars}


def _check_log_store(session: "SparkSession") -> None:
    """Under spark-submit: the log store `pgcdc submit-args` names must be on the classpath."""
    from py4j.protocol import Py4JJavaError

    if session.conf.get("spark.delta.logStore.file.impl", None) != logstore.CLASS:
        return
    try:
        jvm: Any = session._jvm
        jvm.org.apache.spark.util.Utils.classForName(logstore.CLASS, True, False)
    except Py4JJavaError:
        raise SetupError(f"spark-submit cannot load {logstore.CLASS}, the log store for local tables; pass the "
                         "arguments `pgcdc submit-args` prints (its --jars builds the jar and names it)") from None


def smoke_test() -> None:
    """Resolve the jars once and prove Delta works (`python -m pgcdc.spark`, scripts/setup.sh)."""
    import tempfile

    spark = get_session()
    with tempfile.TemporaryDirectory() as tmp:
        spark.range(3).write.format("delta").save(tmp + "/t")
        assert spark.read.format("delta").load(tmp + "/t").count() == 3
    print("spark + delta ok")
    spark.stop()
