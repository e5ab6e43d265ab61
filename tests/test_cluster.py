"""The ingest job on a Spark standalone cluster (tests/fixtures/cluster.py: a master and two
workers on loopback) into an s3a:// target on the suite's S3 server, submitted the way a
user submits it: `spark-submit --master spark://... $(pgcdc submit-args) --py-files
<the wheel>`. The oracle: PostgreSQL through psycopg, the Delta table through this test's
own Spark session (not the cluster's)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from fixtures.cluster import Cluster
from fixtures.s3 import S3Server
from fixtures.wheel import build_wheel
from pgcdc.source import capture


def _submit(cluster: Cluster, cfg: Path, wheel: Path, cwd: Path) -> str:
    bin_dir = Path(sys.executable).parent
    args = subprocess.run([str(bin_dir / "pgcdc"), "--config", str(cfg), "submit-args"], cwd=cwd, capture_output=True,
                          text=True, check=True).stdout
    env = os.environ | {"PYSPARK_PYTHON": sys.executable}
    proc = subprocess.run([str(bin_dir / "spark-submit"), "--master", cluster.master, "--py-files", str(wheel),
                           "--conf", "spark.executor.memory=768m", *shlex.split(args), "--config", str(cfg)],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc.stdout + proc.stderr  # (the log is on stderr)


@pytest.mark.slow
def test_ingest_on_a_standalone_cluster_into_s3_equals_postgres(db: psycopg.Connection, dsn: str, spark,
                                                                spark_cluster: Cluster, s3_server: S3Server,
                                                                tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path / "dist")
    root = s3_server.root(f"cluster-{tmp_path.name}")
    conf = "\n".join(f'"{k}" = "{v}"' for k, v in s3_server.spark_conf().items())
    cfg = tmp_path / "pgcdc.toml"
    cfg.write_text(f'consumer = "cluster"\n[source]\ndsn = "{dsn}"\n[target]\nroot = "{root}"\n'
                   f"[ingest]\njdbc_partitions = 2\n[spark.conf]\n{conf}\n")
    db.execute("create table t (id bigint primary key, v text, d date)")
    db.execute("insert into t select i, 'v' || i, date '2024-01-01' + i % 365 from generate_series(1, 5000) i")
    capture.attach(db, "t")

    def check() -> None:
        want = set(db.execute("select id, v, d from t").fetchall())
        got = {tuple(r) for r in spark.read.format("delta").load(f"{root}/public.t").select("id", "v", "d").collect()}
        assert got == want

    out = _submit(spark_cluster, cfg, wheel, tmp_path)
    assert "public.t: copied 5000 rows" in out
    check()
    db.execute("update t set v = 'changed' where id % 7 = 0")
    db.execute("delete from t where id % 11 = 0")
    db.execute("insert into t select i, 'new', null from generate_series(10001, 10300) i")
    out = _submit(spark_cluster, cfg, wheel, tmp_path)
    assert "public.t: engine merge: the table is not on the local file system" in out
    check()
    master = (spark_cluster.logs / "master.log").read_text()
    assert master.count("Registered app pgcdc") >= 2 and master.count("Launching executor") >= 4  # both workers
