"""The ingest job through spark-submit: its arguments (`pgcdc submit-args`) and a run with
this environment's pyspark and Python (`pgcdc submit`), which works from any directory and
without the virtualenv activated (pip's spark-submit script looks for Spark with whatever
`python3` is on PATH)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

from pgcdc.spark import logstore, storage
from pgcdc.spark.session import DEFAULT_CONF, log_conf, packages

JOB = Path(__file__).resolve().with_name("job.py")  # the packaged entry point (pgcdc/cli/job.py)


def submit_args(target_root: str | None = None, job: str | None = None) -> list[str]:
    """spark-submit's arguments for the ingest job (before the job's own --config): the
    packages, pgcdc's log store jar, the confs pgcdc's own sessions set (DEFAULT_CONF, the
    S3A defaults for an s3a:// root) and the entry point (`job`, default the packaged
    pgcdc/cli/job.py). One place for versions and confs: a session pgcdc starts uses the same."""
    remote = storage.S3A_DEFAULTS if storage.scheme(target_root or "") == "s3a" else {}
    confs = DEFAULT_CONF | remote | {"spark.delta.logStore.file.impl": logstore.CLASS} | log_conf()
    return ["--packages", packages(target_root), "--jars", str(logstore.build()),
            *[arg for key, value in confs.items() for arg in ("--conf", f"{key}={value}")],
            job or str(JOB)]


def run(target_root: str, config: str | None, spark_args: list[str]) -> int:
    """spark-submit the ingest job (`spark_args` first: --master, --py-files, ...); its exit code."""
    import pyspark

    home = Path(pyspark.__file__).parent
    env = os.environ | {"SPARK_HOME": str(home), "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable)}
    cmd = [str(home / "bin" / "spark-submit"), *spark_args, *submit_args(target_root),
           *(["--config", config] if config else [])]
    shown = shlex.join(["spark-submit", *spark_args])
    print(f"pgcdc: {shown} <the arguments `pgcdc submit-args` prints>{' --config ' + config if config else ''}", flush=True)
    return subprocess.call(cmd, env=env)
