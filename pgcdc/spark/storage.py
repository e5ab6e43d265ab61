"""Object storage targets (`target.root = "s3a://bucket/prefix"`): the jars Spark needs for
them and a check, before any table is touched, that the bucket answers.

Hadoop's S3A file system (`hadoop-aws`, with the AWS SDK bundle it depends on) is resolved
from Maven Central in the version of the Hadoop that pyspark ships, like the Delta jars,
into the Ivy cache. It takes Hadoop's standard settings: `spark.hadoop.fs.s3a.*` under
`[spark] conf` (endpoint, path-style access, keys) or the usual AWS environment variables
and credential providers (docs/deploying.md).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pgcdc.errors import ConfigError, TargetError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Fail within seconds, not minutes, when the endpoint does not answer (S3A retries ~20 times
# by default); buffer uploads in memory (S3A's default, disk, takes Hadoop's checksummed local
# file system, which pgcdc swaps for the raw one: LOCAL_FILES_CONF in pgcdc/spark/session.py).
# [spark] conf overrides these.
S3A_DEFAULTS = {
    "spark.hadoop.fs.s3a.fast.upload.buffer": "bytebuffer",
    "spark.hadoop.fs.s3a.attempts.maximum": "2",
    "spark.hadoop.fs.s3a.retry.limit": "2",
    "spark.hadoop.fs.s3a.connection.establish.timeout": "5000",
    "spark.hadoop.fs.s3a.connection.timeout": "30000",
}


def scheme(root: str) -> str | None:
    """The URI scheme of a target root (None for a local folder)."""
    match = re.match(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://", root)
    return match.group(1).lower() if match and match.group(1).lower() != "file" else None


def check_scheme(root: str) -> None:
    """Refuse the S3 schemes Spark does not serve (s3://, s3n://) naming the one it does."""
    if scheme(root) in ("s3", "s3n"):
        raise ConfigError(f"target.root {root}: Spark reaches S3 through Hadoop's s3a:// file system; write "
                          f"target.root = \"s3a://{root.split('://', 1)[1]}\"")


def hadoop_version() -> str:
    """The Hadoop version pyspark ships (its hadoop-client-api jar: in SPARK_HOME's jars under
    spark-submit, where pyspark is imported from a zip; else beside the installed pyspark)."""
    import os

    import pyspark

    homes = [Path(os.environ["SPARK_HOME"])] if os.environ.get("SPARK_HOME") else []
    homes.append(Path(pyspark.__file__).parent)
    jars = sorted(j for home in homes for j in home.joinpath("jars").glob("hadoop-client-api-*.jar"))
    if not jars:
        raise ConfigError("pyspark ships no hadoop-client-api jar; pass the hadoop-aws jar matching your Spark's "
                          "Hadoop with spark-submit --packages")
    return jars[0].name[len("hadoop-client-api-"):-len(".jar")]


def packages(root: str) -> list[str]:
    """The Maven coordinates a target root needs beyond Delta and the JDBC driver."""
    check_scheme(root)
    if scheme(root) == "s3a":
        return [f"org.apache.hadoop:hadoop-aws:{hadoop_version()}"]
    return []


def check_root(spark: "SparkSession", root: str) -> str | None:
    """For a remote root: check that Spark reaches it, reading only (the bucket exists, the
    credentials are accepted); what was checked, or None for a local root. TargetError
    naming the setting to fix if not."""
    from py4j.protocol import Py4JJavaError

    if scheme(root) is None:
        return None
    check_scheme(root)
    jvm: Any = spark._jvm
    try:
        path = jvm.org.apache.hadoop.fs.Path(root)
        fs = path.getFileSystem(spark._jsc.hadoopConfiguration())
        fs.exists(path)
    except Py4JJavaError as exc:
        raise TargetError(explain(root, exc.java_exception)) from None
    return f"{root} (reachable)"


def explain(root: str, error: Any) -> str:
    """One line naming the setting behind an object-store error (never a secret)."""
    text = _messages(error)
    bucket = root.split("://", 1)[1].split("/", 1)[0]
    if "No FileSystem for scheme" in text or "S3AFileSystem not found" in text or "ClassNotFound" in text:
        try:
            jar = f"org.apache.hadoop:hadoop-aws:{hadoop_version()}"
        except ConfigError:
            jar = "org.apache.hadoop:hadoop-aws (your Spark's Hadoop version)"
        return (f"target.root {root}: Spark has no s3a file system on its classpath; pgcdc resolves {jar} for "
                "its own sessions; under spark-submit add it to --packages (pgcdc submit-args prints them)")
    if re.search(r"NoSuchBucket|UnknownStoreException|bucket \S+ does not exist", text, re.IGNORECASE):
        return f"target.root {root}: bucket {bucket} does not exist; create it or point target.root at another bucket"
    if re.search(r"InvalidAccessKeyId|SignatureDoesNotMatch|AccessDenied|403|Forbidden|credential", text,
                 re.IGNORECASE):
        return (f"target.root {root}: S3 refused the credentials for bucket {bucket}; check "
                "spark.hadoop.fs.s3a.access.key / spark.hadoop.fs.s3a.secret.key in [spark] conf (or "
                "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY) and the bucket's policy")
    if re.search(r"Connection refused|UnknownHost|connect timed out|Unable to execute HTTP request|"
                 r"Connect to .* failed|SdkClientException", text, re.IGNORECASE):
        return (f"target.root {root}: cannot reach the S3 endpoint; check spark.hadoop.fs.s3a.endpoint in [spark] conf "
                "(and spark.hadoop.fs.s3a.path.style.access for a server other than AWS)")
    first = text.splitlines()[0] if text else type(error).__name__
    return f"target.root {root}: Spark cannot read it: {_redact(first)[:300]}"


def _messages(error: Any) -> str:
    """The messages of a Java exception and its causes."""
    parts: list[str] = []
    while error is not None and len(parts) < 8:
        parts.append(f"{error.getClass().getName()}: {error.getMessage()}")
        error = error.getCause()
    return "\n".join(parts)


def _redact(text: str) -> str:
    """Drop anything that looks like a key or signature from a message."""
    return re.sub(r"(?i)(key|secret|signature|token|credential)[^\s,;]*\s*[=:]\s*\S+", r"\1=***", text)
