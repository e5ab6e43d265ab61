"""Spark + Delta + JDBC really work: write, MERGE, read back; read a PostgreSQL table over JDBC."""

from __future__ import annotations

from pathlib import Path

from chispa import assert_df_equality

from pgcdc.source.db import jdbc_options


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
    df = spark.read.format("jdbc").options(**jdbc_options(conn)).option("dbtable", "t").load()
    assert sorted((r.id, r.name, None if r.price is None else str(r.price)) for r in df.collect()) == [
        (1, "x", "1.50"), (2, "y", None)]


def test_local_tables_keep_deltas_files_and_commit_rules_without_hadoop_side_files(spark, tmp_path: Path) -> None:
    """LOCAL_FILES_CONF (pgcdc's sessions and spark-submit's arguments, `pgcdc submit-args`): Delta still
    writes its commits and checksum files, refuses to write a version that exists, and
    Hadoop writes no ".crc" side files next to them."""
    import py4j.protocol
    import pytest

    from pgcdc.spark.jvm import seq
    from pgcdc.spark.session import LOCAL_FILES_CONF
    from pgcdc.cli.submit import submit_args

    args = submit_args()
    submitted = dict(args[i + 1].split("=", 1) for i, a in enumerate(args) if a == "--conf")
    assert {k: submitted.get(k) for k in LOCAL_FILES_CONF} == LOCAL_FILES_CONF

    path = tmp_path / "t"
    spark.range(3).write.format("delta").save(str(path))
    spark.range(3, 5).write.format("delta").mode("append").save(str(path))
    log_files = sorted(p.name for p in (path / "_delta_log").iterdir())
    assert log_files[:4] == ["00000000000000000000.crc", "00000000000000000000.json",
                             "00000000000000000001.crc", "00000000000000000001.json"]
    assert [p.name for p in path.rglob(".*.crc")] == []

    log = spark._jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, str(path))
    first = path / "_delta_log" / "00000000000000000001.json"
    before = first.read_bytes()
    with pytest.raises(py4j.protocol.Py4JJavaError, match="FileAlreadyExists"):
        log.store().write(spark._jvm.org.apache.hadoop.fs.Path(str(first)), seq(spark, ["{}"]).iterator(), False,
                          log.newDeltaHadoopConf())
    assert first.read_bytes() == before
    assert spark.read.format("delta").load(str(path)).count() == 5
