"""The txn version, metadata and file list read from the Delta log as files (tablelog) and
by the fast engine's transaction (engines/fast/deltalog) agree with Delta's own state
reconstruction, and batches stay exact when the checksum lacks them."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest

from pgcdc.source import capture
from pgcdc.lake import tablelog
from pgcdc.engines.fast import deltalog
from pgcdc.engines.fast.deltalog import Opened
from pgcdc.errors import TargetError
from pgcdc.spark.jvm import pylist
from pyspark.sql.types import StructType

from fixtures.ingest import run_with_writer_before_commit

THRESHOLD = "spark.databricks.delta.allFilesInCrc.thresholdNumFiles"


def _sync_a_few_batches(db: psycopg.Connection, syncer) -> None:
    db.execute("create table t (id int primary key, v text)")
    db.execute("insert into t select i, 'a' from generate_series(1, 30) i")
    capture.attach(db, "t")
    syncer.run()
    for v in ("b", "c"):
        db.execute("update t set v = %s where id %% 3 = 0", (v,))
        db.execute("delete from t where id = (select max(id) from t)")
        syncer.run()


def test_checksum_answers_match_the_state_reconstruction(db: psycopg.Connection, syncer) -> None:
    _sync_a_few_batches(db, syncer)
    jvm = syncer.spark._jvm
    log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(syncer.spark._jsparkSession, syncer.path("public.t"))
    snapshot = log.update(False, jvm.scala.Option.empty(), jvm.scala.Option.empty())
    assert snapshot.checksumOpt().isDefined()  # Delta wrote it: the answers below come from it
    path = syncer.path("public.t")
    assert tablelog.txn_version(syncer.spark, path, "pgcdc:test") == \
        snapshot.transactions().get("pgcdc:test").get() == 3
    assert tablelog.txn_version(syncer.spark, path, "pgcdc:other") == -1
    read = tablelog.read_state(syncer.spark, path)
    assert read.version == snapshot.version()
    assert read.configuration["pgcdc.consumer"] == snapshot.metadata().configuration().get("pgcdc.consumer").get()
    assert read.schema() == StructType.fromJson(json.loads(snapshot.schema().json()))
    assert len(read.all_files or []) == snapshot.numOfFiles()
    from_checksum = pylist(syncer.spark, deltalog.read_all_files(deltalog.Opened.of(syncer.spark, path)))
    reconstructed = pylist(syncer.spark, log.startTransaction().filterFiles())
    assert sorted((a.path(), a.deletionVector() and a.deletionVector().cardinality()) for a in from_checksum) == \
        sorted((a.path(), a.deletionVector() and a.deletionVector().cardinality()) for a in reconstructed)
    assert len(from_checksum) >= 2 and any(a.deletionVector() for a in from_checksum)


@pytest.mark.parametrize("missing", ["checksum files", "file list"])
def test_batches_stay_exact_without_the_checksum(db: psycopg.Connection, syncer, missing: str) -> None:
    """Another tool may write the table without checksums, or the table may have more
    files than Delta lists in them: the batch then asks Delta's state reconstruction."""
    _sync_a_few_batches(db, syncer)
    log_dir = Path(syncer.path("public.t")) / "_delta_log"
    try:
        if missing == "checksum files":
            for crc in log_dir.glob("*.crc"):
                crc.unlink()
            syncer.spark._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()
        else:
            syncer.spark.conf.set(THRESHOLD, "1")
        for v in ("d", "e"):
            db.execute("update t set v = %s where id %% 2 = 0", (v,))
            db.execute("insert into t values ((select max(id) + 1 from t), %s)", (v,))
            assert syncer.run()["public.t"].events == 2
            syncer.assert_equal("public.t")
        assert syncer.run()["public.t"].events == 0
    finally:
        syncer.spark.conf.unset(THRESHOLD)
    assert syncer.delta("public.t").count() == db.execute("select count(*) from t").fetchone()[0]


def test_another_commit_of_the_same_consumer_during_a_batch_fails_it(db: psycopg.Connection, syncer,
                                                                      monkeypatch) -> None:
    """The txn version read from the checksum is recorded as read: a commit carrying the
    consumer's app id (a second, misconfigured job) makes the batch's commit fail, and
    the next run refuses the batch number the other job took."""
    _sync_a_few_batches(db, syncer)
    path = syncer.path("public.t")

    def other_job() -> None:  # an empty idempotent write with the consumer's app id
        syncer.spark.range(0).selectExpr("cast(id as int) id", "'x' v").write.format("delta").mode("append") \
            .option("txnAppId", "pgcdc:test").option("txnVersion", 4).save(path)
    db.execute("insert into t values (1000, 'new')")
    commits = syncer.commits("public.t")
    run_with_writer_before_commit(syncer, monkeypatch, other_job)
    assert syncer.commits("public.t") == commits + 1  # the other job's only
    with pytest.raises(TargetError, match="records batch 4 of consumer test but its state is neither"):
        syncer.run()  # that job claimed batch 4: this one refuses to run beside it
    assert syncer.delta("public.t").where("id = 1000").count() == 0


def test_files_with_new_deletion_vectors_keep_statistics_that_skip_correctly(db: psycopg.Connection, syncer) -> None:
    """The re-added files carry statistics as Delta's own DML writes them ("wide" bounds:
    min/max and null counts may include deleted rows), so queries that skip files by
    statistics still see exactly the PostgreSQL rows."""
    import json

    db.execute("create table t (id int primary key, n int)")
    db.execute("insert into t select i, case when i > 5 then 1 end from generate_series(1, 10) i")
    capture.attach(db, "t")
    syncer.run()
    db.execute("update t set n = 2 where id > 5")  # the copy's live rows: n null in all of them
    syncer.run()
    log = Path(syncer.path("public.t")) / "_delta_log"
    actions = [json.loads(line) for line in sorted(log.glob("*.json"))[-1].read_text().splitlines()]
    (copy,) = [a["add"] for a in actions if "add" in a and a["add"].get("deletionVector")]
    stats = json.loads(copy["stats"])
    assert copy["deletionVector"]["cardinality"] == 5
    assert stats["numRecords"] == 10 and stats["tightBounds"] is False
    assert stats["nullCount"]["n"] == 5  # as Delta's DML leaves it: a count over the rows before the batch
    assert stats["minValues"]["id"] == 1 and stats["maxValues"]["id"] == 10
    for where in ("n is null", "n is not null", "n = 2", "n = 1", "id between 4 and 7"):
        got = sorted(r.id for r in syncer.delta("public.t").where(where).select("id").collect())
        want = [r[0] for r in db.execute(f"select id from t where {where} order by id").fetchall()]
        assert got == want, where


def test_table_whose_folder_name_needs_escaping_applies_batches(db: psycopg.Connection, syncer) -> None:
    """The stored rows are read by file path and matched back to the log's entries:
    a folder name with a space, a slash (stored as %2F) and a percent sign must survive."""
    db.execute('create schema "Odd Schema"')
    db.execute('create table "Odd Schema"."a/b c%" (id int primary key, v text)')
    db.execute('insert into "Odd Schema"."a/b c%" select i, \'a\' from generate_series(1, 10) i')
    name = '"Odd Schema"."a/b c%"'
    capture.attach(db, name)
    syncer.run()
    assert syncer.path(name).endswith("/Odd Schema.a%2Fb c%")
    db.execute(f"update {name} set v = 'b' where id <= 3")
    db.execute(f"delete from {name} where id = 10")
    report = syncer.run()[name]
    assert (report.upserted, report.deleted) == (3, 1)
    syncer.assert_equal(name)
    assert syncer.delta(name).count() == 9


def test_column_mapping_turned_on_by_another_tool_still_applies_batches(db: psycopg.Connection, syncer) -> None:
    """With column mapping the files store other column names: the key column is then
    read through Delta instead of as plain Parquet."""
    db.execute("create table t (id int primary key, v text)")
    db.execute("insert into t select i, 'a' from generate_series(1, 10) i")
    capture.attach(db, "t")
    syncer.run()
    syncer.spark.sql(f"alter table delta.`{syncer.path('public.t')}` set tblproperties ("
                     "'delta.minReaderVersion' = '2', 'delta.minWriterVersion' = '5', "
                     "'delta.columnMapping.mode' = 'name')")
    syncer.spark.sql(f"alter table delta.`{syncer.path('public.t')}` rename column v to w")
    db.execute("update t set v = 'b' where id <= 3")
    assert syncer.run()["public.t"].copied == 10  # the renamed column is a schema change: the table is copied
    assert "public.t: its columns changed (column v is not in its Delta table as pgcdc left it (another writer " \
        "changed the table)): copying the table again" in syncer.lines, syncer.lines
    syncer.assert_equal("public.t")
    db.execute("update t set v = 'c' where id <= 3")
    db.execute("delete from t where id = 10")
    report = syncer.run()["public.t"]
    assert (report.copied, report.upserted, report.deleted) == (None, 3, 1)
    syncer.assert_equal("public.t")


@pytest.mark.parametrize("positions,length,start", [
    ([0], 1, 0), ([5, 9, 70_000], 70_001, 0),           # array containers in two 16-bit blocks
    (list(range(3, 20_000, 3)), 20_000, 0),             # > 4096 values in one block: a bitmap container
    (list(range(65_536, 70_003)), 70_003, 0),           # a bitmap container in a last block of 4467 rows
    (list(range(1, 9000, 2)) + [70_001], 70_005, 3),    # a mask that starts mid-byte (a slice)
], ids=["one", "sparse", "dense", "dense-tail", "sliced"])
def test_deletion_vector_bitmap_built_on_the_driver_is_what_delta_writes(spark, positions: list[int], length: int,
                                                                         start: int) -> None:
    """The driver path serializes its bitmaps itself from a mask over a file's rows
    (driver_marks): byte for byte Delta's own serialization of the same set, and Delta
    reads back the same positions."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from pgcdc.engines.fast.driver_marks import portable_bitmap

    dv = spark._jvm.org.apache.spark.sql.delta.deletionvectors
    rows = pa.array(range(length + start), pa.int64())
    mask = pc.is_in(rows, value_set=pa.array([p + start for p in positions], pa.int64())).slice(start)
    assert mask.offset == start and len(mask) == length
    ours = portable_bitmap(mask)
    read = dv.RoaringBitmapArray.readFrom(ours)
    assert read.cardinality() == len(positions) and list(read.toArray()) == positions
    theirs = dv.RoaringBitmapArray()
    for p in positions:
        theirs.add(p)
    assert bytes(theirs.serializeAsByteArray(dv.RoaringBitmapArrayFormat.Portable())) == ours


def test_driver_path_only_for_files_on_the_local_file_system(spark, tmp_path: Path) -> None:
    """driver_marks reads files with pyarrow from local paths: one file anywhere else (an
    object store) sends the batch to the Spark join, which reads through Hadoop."""
    from pgcdc.engines.fast.driver_marks import local_paths

    path = str(tmp_path / "t")
    spark.range(3).repartition(2).write.format("delta").save(path)
    delta = spark._jvm.org.apache.spark.sql.delta
    opened = Opened.of(spark, path)
    local = pylist(spark, opened.txn.filterFiles())
    remote = delta.actions.Action.fromJson(
        '{"add":{"path":"s3a://bucket/t/part-00000.parquet","partitionValues":{},"size":1,'
        '"modificationTime":0,"dataChange":true}}')
    found = local_paths(opened, local)
    assert sorted(found) == sorted(str(p) for p in Path(path).glob("part-*.parquet")) and len(found) == 2
    assert local_paths(opened, local + [remote]) is None
    assert local_paths(opened, [remote]) is None


def test_local_paths_decode_delta_file_names_as_hadoop_does(spark, tmp_path: Path) -> None:
    """The fast engine decodes Delta's relative, URI-encoded file paths itself (no Py4J round
    trips): the same paths Hadoop gives, also for names Delta has to encode, and each exists."""
    from pgcdc.engines.fast import driver_marks

    path = str(tmp_path / "odd folder %é")
    spark.createDataFrame([(1, "a b"), (2, "50%"), (3, "é/x"), (4, "plain"), (5, "a+b=c:d")], "id long, p string") \
        .write.format("delta").partitionBy("p").save(path)
    opened = Opened.of(spark, path)
    files = pylist(spark, opened.txn.filterFiles())
    assert len(files) == 5 and any("%" in f.path() for f in files)  # (names Delta had to encode)
    log = opened.txn.deltaLog()
    paths = driver_marks.local_paths(opened, files)
    assert paths == [f.absolutePath(log).toUri().getPath() for f in files]
    assert all(Path(p).is_file() for p in paths)
