"""[target] database: each synced table is also registered in the Spark catalog as
<database>.<schema>_<table>, readable by name from another Spark application (a Hive
metastore on Spark's embedded Derby), and a name that another table's folder holds is
refused. The oracle reads PostgreSQL with psycopg and the table by name with plain Spark."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from pgcdc.source import capture
from pgcdc.errors import TargetError

_READER = """
import json, sys
from delta import configure_spark_with_delta_pip
from pyspark.sql import SparkSession
conf = json.loads(sys.argv[1])
builder = SparkSession.builder.master("local[1]").appName("reader")
for k, v in conf.items():
    builder = builder.config(k, v)
spark = configure_spark_with_delta_pip(builder).getOrCreate()
rows = spark.table(sys.argv[2]).select("id", "v").collect()
print("ROWS " + json.dumps(sorted([r.id, r.v] for r in rows)))
"""


@pytest.mark.slow
def test_registered_table_reads_by_name_from_another_spark_application(db: psycopg.Connection, dsn: str,
                                                                        tmp_path: Path) -> None:
    hive = {"spark.sql.catalogImplementation": "hive", "spark.sql.warehouse.dir": str(tmp_path / "warehouse"),
            "spark.hadoop.javax.jdo.option.ConnectionURL":
                f"jdbc:derby:;databaseName={tmp_path / 'metastore_db'};create=true",
            "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
            "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog"}
    db.execute("create table t (id int primary key, v text)")
    db.execute("insert into t select i, 'v' || i from generate_series(1, 30) i")
    capture.attach(db, "t")
    conf = "\n".join(f'"{k}" = "{v}"' for k, v in hive.items())
    cfg = tmp_path / "pgcdc.toml"
    cfg.write_text(f'consumer = "cat"\n[source]\ndsn = "{dsn}"\n[target]\nroot = "{tmp_path / "lake"}"\n'
                   f'database = "lake"\n[spark.conf]\n{conf}\n')

    def ingest() -> str:
        proc = subprocess.run([sys.executable, "-m", "pgcdc", "--config", str(cfg), "ingest"], cwd=tmp_path,
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return proc.stdout + proc.stderr  # (the log is on stderr)

    assert "public.t: registered in the catalog as lake.public_t" in ingest()
    db.execute("update t set v = 'changed' where id % 4 = 0")
    db.execute("delete from t where id = 7")
    assert "registered in the catalog" not in ingest()  # (found, not registered twice)
    read = subprocess.run([sys.executable, "-c", _READER, json.dumps(hive), "lake.public_t"], cwd=tmp_path,
                          capture_output=True, text=True)
    assert read.returncode == 0, read.stderr[-3000:]
    rows = json.loads(next(line for line in read.stdout.splitlines() if line.startswith("ROWS "))[5:])
    assert sorted(list(r) for r in db.execute("select id, v from t").fetchall()) == rows


def test_catalog_name_held_by_another_table_is_refused(db: psycopg.Connection, syncer) -> None:
    """public.a_b and public_a.b both map to <database>.public_a_b: the second is refused,
    naming both, and the first keeps its name."""
    db.execute("create schema public_a")
    for name, value in (("public.a_b", 1), ("public_a.b", 2)):
        db.execute(f"create table {name} (id int primary key)")
        db.execute(f"insert into {name} values ({value})")
        capture.attach(db, name)
    database = f"lake_{Path(syncer.root).parent.name[-20:].replace('-', '_')}".lower()
    syncer.run(tables=["public.a_b"], target={"database": database})
    with pytest.raises(TargetError) as refused:
        syncer.run(tables=["public_a.b"], target={"database": database})
    assert f"catalog table {database}.public_a_b already points at" in str(refused.value)
    assert "public_a.b" in str(refused.value)
    assert [r.id for r in syncer.spark.table(f"{database}.public_a_b").collect()] == [1]
