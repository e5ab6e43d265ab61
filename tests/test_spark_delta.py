"""Spark + Delta + JDBC really work: write, MERGE, read back; read a PostgreSQL table over JDBC."""

from __future__ import annotations

from pathlib import Path

from chispa import assert_df_equality

from pgcdc.db import jdbc_options


def test_delta_write_merge_read(spark, tmp_path: Path) -> None:
    from delta.tables import DeltaTable

    path = str(tmp_path / "t")
    spark.createDataFrame([(1, "a"), (2, "b"), (3, "c")], "id long, v string").write.format("delta").save(path)
    changes = spark.createDataFrame([(2, "B", True), (3, None, False), (4, "d", True)], "id long, v string, live boolean")
    (DeltaTable.forPath(spark, path).alias("t").merge(changes.alias("s"), "t.id = s.id")
     .whenMatchedDelete("not s.live").whenMatchedUpdate("s.live", {"v": "s.v"})
     .whenNotMatchedInsert("s.live", {"id": "s.id", "v": "s.v"}).execute())
    expected = spark.createDataFrame([(1, "a"), (2, "B"), (4, "d")], "id long, v string")
    assert_df_equality(spark.read.format("delta").load(path), expected, ignore_row_order=True)
    assert DeltaTable.forPath(spark, path).history().count() == 2


def test_jdbc_reads_postgres(spark, conn, dsn: str) -> None:
    conn.execute("create table t (id int primary key, name text, price numeric(10,2))")
    conn.execute("insert into t values (1, 'x', 1.50), (2, 'y', null)")
    df = spark.read.format("jdbc").options(**jdbc_options(dsn)).option("dbtable", "t").load()
    assert sorted((r.id, r.name, None if r.price is None else str(r.price)) for r in df.collect()) == [
        (1, "x", "1.50"), (2, "y", None)]
