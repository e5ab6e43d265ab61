"""The ingest job on a Spark standalone cluster (tests/fixtures/cluster.py: a master and two
workers on loopback) into an s3a:// target on the suite's S3 server, submitted the way a
user submits it: `spark-submit --master spark://... $(pgcdc submit-args) --py-files
<the wheel> --follow`. One application copies the table, applies the changes written while it
follows, and stops on SIGTERM with exit 0 (one submit: each application's executors fetch
~500 MB of jars, CI time counts). The oracle: PostgreSQL through psycopg, the Delta table
through this test's own Spark session (not the cluster's)."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

from fixtures.cluster import Cluster
from fixtures.s3 import S3Server
from fixtures.spark import delta_frame
from fixtures.wheel import build_wheel
from pgcdc.source import capture


def _submit(cluster: Cluster, cfg: Path, wheel: Path, cwd: Path, log: Path) -> subprocess.Popen[bytes]:
    """`spark-submit ... --follow` in its own process group, its output in `log`."""
    bin_dir = Path(sys.executable).parent
    args = subprocess.run([str(bin_dir / "pgcdc"), "--config", str(cfg), "submit-args"], cwd=cwd, capture_output=True,
                          text=True, check=True).stdout
    env = os.environ | {"PYSPARK_PYTHON": sys.executable}
    with open(log, "wb") as out:
        return subprocess.Popen([str(bin_dir / "spark-submit"), "--master", cluster.master, "--py-files", str(wheel),
                                 "--conf", "spark.executor.memory=768m", *shlex.split(args), "--config", str(cfg),
                                 "--follow", "--interval", "0.5"],
                                cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def _driver(submit: subprocess.Popen[bytes]) -> int:
    """The job's Python process in spark-submit's session (the driver's JVM starts it, naming
    job.py too)."""
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and os.getsid(int(entry.name)) == submit.pid:
                argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
                if "python" in Path(argv[0]).name and any(arg.endswith("job.py") for arg in argv):
                    return int(entry.name)
        except (ProcessLookupError, FileNotFoundError, PermissionError):
            continue
    raise AssertionError("no job.py process in spark-submit's session")


@pytest.mark.slow
def test_a_follower_on_a_standalone_cluster_into_s3_equals_postgres_and_stops_on_sigterm(
        db: psycopg.Connection, dsn: str, spark, spark_cluster: Cluster, s3_server: S3Server, tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path / "dist")
    root = s3_server.root(f"cluster-{tmp_path.name}")
    conf = "\n".join(f'"{k}" = "{v}"' for k, v in s3_server.spark_conf().items())
    cfg = tmp_path / "pgcdc.toml"
    cfg.write_text(f'consumer = "cluster"\n[source]\ndsn = "{dsn}"\n[target]\nroot = "{root}"\n'
                   f"[ingest]\njdbc_partitions = 2\n[spark.conf]\n{conf}\n")
    db.execute("create table t (id bigint primary key, v text, d date)")
    db.execute("insert into t select i, 'v' || i, date '2024-01-01' + i % 365 from generate_series(1, 5000) i")
    db.execute("analyze t")  # (the planner's row count: the batch below stays under [ingest] recopy_fraction)
    capture.attach(db, "t")
    log = tmp_path / "submit.log"

    def said() -> str:
        return log.read_text(errors="replace")

    def landed(what: str, timeout: float = 300) -> None:
        """Wait until Delta holds PostgreSQL's rows (the follower keeps going meanwhile)."""
        want = set(db.execute("select id, v, d from t").fetchall())
        path, got = f"{root}/public.t", None
        deadline = time.monotonic() + timeout
        while True:
            assert submit.poll() is None, f"spark-submit exited {submit.returncode}:\n{said()[-5000:]}"
            if (frame := delta_frame(spark, path)) is not None:
                got = {tuple(r) for r in frame.select("id", "v", "d").collect()}
                if got == want:
                    return
            seen = "no Delta table" if got is None else \
                f"{len(got)} rows, {len(want - got)} missing, {len(got - want)} not in PostgreSQL"
            assert time.monotonic() < deadline, f"{what} not in Delta after {timeout:.0f} s ({seen}):\n{said()[-5000:]}"
            time.sleep(2)

    submit = _submit(spark_cluster, cfg, wheel, tmp_path, log)
    try:
        landed("the first copy")
        assert "public.t: copied 5000 rows" in said()
        db.execute("update t set v = 'changed' where id % 20 = 0")
        db.execute("delete from t where id % 30 = 0")
        db.execute("insert into t select i, 'new', null from generate_series(10001, 10300) i")
        landed("the changes")
        assert re.search(r"public\.t: batch \d+ applied by merge", said()), said()[-3000:]  # (auto: S3 is not local)
        os.kill(_driver(submit), signal.SIGTERM)
        assert submit.wait(timeout=120) == 0, said()[-5000:]
    finally:
        if submit.poll() is None:
            os.killpg(submit.pid, signal.SIGKILL)
            submit.wait()
    assert "follower of consumer cluster stopped (SIGTERM)" in said(), said()[-3000:]
    master = (spark_cluster.logs / "master.log").read_text()
    assert master.count("Registered app pgcdc") == 1 and master.count("Launching executor") >= 2  # both workers
