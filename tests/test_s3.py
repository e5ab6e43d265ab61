"""Targets on object storage: s3a:// on the suite's S3-compatible server (moto, a real HTTP
S3 API with authentication on). The oracle reads PostgreSQL with psycopg and the Delta table
with a plain Spark reader and with delta-rs over S3, never through pgcdc."""

from __future__ import annotations

import itertools
from pathlib import Path

import psycopg
import pytest

from fixtures.ingest import Syncer
from fixtures.s3 import S3Server
from pgcdc.source import capture
from pgcdc.errors import TargetError

_prefixes = itertools.count()


def _prefix(name: str) -> str:
    return f"{name}-{next(_prefixes)}"


def _keys(s3: S3Server, prefix: str) -> list[str]:
    listed = s3.client().list_objects_v2(Bucket=s3.bucket, Prefix=prefix)
    return [o["Key"] for o in listed.get("Contents", [])]


def test_table_synced_to_s3_equals_postgres(db: psycopg.Connection, spark, dsn: str, s3_server: S3Server) -> None:
    from deltalake import DeltaTable, QueryBuilder

    prefix = _prefix("lake")
    syncer = Syncer(spark, dsn, s3_server.root(prefix))
    db.execute("create table t (id int primary key, v text, n numeric(8, 2))")
    db.execute("insert into t select i, 'v' || i, i / 4.0 from generate_series(1, 500) i")
    capture.attach(db, "t")
    assert syncer.run()["public.t"].copied == 500
    db.execute("update t set v = 'changed' where id % 3 = 0")
    db.execute("delete from t where id % 5 = 0")
    db.execute("insert into t select i, 'new', null from generate_series(1000, 1049) i")
    syncer.lines.clear()
    report = syncer.run()["public.t"]
    assert report.events > 0 and report.batches == 1
    assert "public.t: engine merge: the table is not on the local file system" in syncer.lines
    want = set(db.execute("select id, v, n from t").fetchall())

    path = syncer.path("public.t")
    assert path.startswith(f"s3a://{s3_server.bucket}/{prefix}/")
    assert {tuple(r) for r in spark.read.format("delta").load(path).select("id", "v", "n").collect()} == want
    # a second reader over the same S3 API: delta-rs, with the same user's keys
    options = {"AWS_ENDPOINT_URL": s3_server.endpoint, "AWS_ACCESS_KEY_ID": s3_server.access_key,
               "AWS_SECRET_ACCESS_KEY": s3_server.secret_key, "AWS_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true",
               "AWS_S3_ALLOW_UNSAFE_RENAME": "true"}
    table = DeltaTable(path.replace("s3a://", "s3://"), storage_options=options)
    read = QueryBuilder().register("t", table).execute("select id, v, n from t").read_all()
    import pyarrow as pa

    assert {tuple(r.values()) for r in pa.table(read).to_pylist()} == want
    # the state lives beside the table, on S3 too
    assert any("/_pgcdc/" in k for k in _keys(s3_server, prefix))
    assert syncer.run()["public.t"].events == 0


@pytest.mark.parametrize("fault", ["bucket", "keys", "endpoint"])
def test_unusable_s3_target_fails_in_one_line_and_writes_nothing(db: psycopg.Connection, spark, dsn: str,
                                                                 s3_server: S3Server, fault: str) -> None:
    """A missing bucket, keys S3 refuses, an endpoint nobody answers: one line naming the
    setting to fix, no secret in it, and nothing written to S3 or to the consumer's state."""
    hadoop = spark._jsc.hadoopConfiguration()
    bucket = {"bucket": "pgcdc-missing", "keys": "pgcdc-locked", "endpoint": "pgcdc-nowhere"}[fault]
    if fault == "keys":
        s3_server.client().create_bucket(Bucket=bucket)
        hadoop.set(f"fs.s3a.bucket.{bucket}.access.key", s3_server.access_key)
        hadoop.set(f"fs.s3a.bucket.{bucket}.secret.key", "not-the-secret-of-this-key")
    if fault == "endpoint":
        hadoop.set(f"fs.s3a.bucket.{bucket}.endpoint", "http://127.0.0.1:9")
    db.execute("create table t (id int primary key)")
    db.execute("insert into t values (1)")
    capture.attach(db, "t")
    syncer = Syncer(spark, dsn, f"s3a://{bucket}/lake")
    with pytest.raises(TargetError) as failed:
        syncer.run()
    message = str(failed.value)
    assert "\n" not in message and "not-the-secret" not in message and s3_server.secret_key not in message
    assert {"bucket": f"bucket {bucket} does not exist",
            "keys": "spark.hadoop.fs.s3a.access.key / spark.hadoop.fs.s3a.secret.key",
            "endpoint": "spark.hadoop.fs.s3a.endpoint"}[fault] in message
    assert db.execute("select count(*) from pgcdc.consumer_state").fetchone()[0] == 0
    if fault == "keys":
        assert not s3_server.client().list_objects_v2(Bucket=bucket).get("Contents")


def test_spark_without_the_s3a_jar_fails_in_one_line(db: psycopg.Connection, dsn: str, s3_server: S3Server,
                                                     tmp_path) -> None:
    """spark-submit started without hadoop-aws (the arguments of a local root) against an
    s3a:// root: one line naming --packages, exit code 2, nothing written."""
    import os
    import subprocess
    import sys

    from pgcdc.cli.submit import submit_args

    db.execute("create table t (id int primary key)")
    db.execute("insert into t values (1)")
    capture.attach(db, "t")
    prefix = _prefix("nojar")
    conf = "\n".join(f'"{k}" = "{v}"' for k, v in s3_server.spark_conf().items())
    cfg = tmp_path / "pgcdc.toml"
    cfg.write_text(f'consumer = "nojar"\n[source]\ndsn = "{dsn}"\n[target]\nroot = "{s3_server.root(prefix)}"\n'
                   f"[spark.conf]\n{conf}\n")
    spark_submit = str(Path(sys.executable).parent / "spark-submit")
    proc = subprocess.run([spark_submit, *submit_args(None), "--config", str(cfg)], cwd=tmp_path,
                          env=os.environ | {"PYSPARK_PYTHON": sys.executable}, capture_output=True, text=True)
    said = [line for line in (proc.stdout + proc.stderr).splitlines() if line.startswith("pgcdc: error")]
    assert proc.returncode == 2 and len(said) == 1, proc.stderr[-2000:]
    assert "has no s3a file system on its classpath" in said[0] and "--packages" in said[0]
    assert s3_server.secret_key not in proc.stdout + proc.stderr
    assert _keys(s3_server, prefix) == []
    assert db.execute("select count(*) from pgcdc.consumer_state").fetchone()[0] == 0
