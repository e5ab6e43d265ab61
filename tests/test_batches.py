"""How a batch is applied, end to end (real PostgreSQL, real Spark + Delta): by a copy when it
changes much of the table, old rows marked deleted on the driver or by a Spark join, the key
index, and the runs' compaction of small files. Delta must equal PostgreSQL after each."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from fixtures.ingest import driver_writes
from pgcdc.source import capture

def test_batch_changing_much_of_the_table_is_applied_by_a_copy(db: psycopg.Connection, syncer) -> None:
    from delta.tables import DeltaTable

    db.execute("create table t (id int primary key, v int)")
    db.execute("insert into t select i, 0 from generate_series(1, 1000) i")
    db.execute("analyze t")
    capture.attach(db, "t")
    syncer.run()
    db.execute("update t set v = 1 where id <= 400")
    db.execute("delete from t where id > 990")
    report = syncer.run(recopy_fraction=0.3)["public.t"]
    assert (report.copied, report.events, report.batches) == (990, 2, 1)
    assert any("copying the table instead of applying the batch" in line for line in syncer.lines)
    syncer.assert_equal("public.t")
    db.execute("update t set v = 2 where id = 1")  # small: applied, and only once
    report = syncer.run(recopy_fraction=0.3)["public.t"]
    assert (report.copied, report.events, report.upserted) == (None, 1, 1)
    ops = [r.operation for r in DeltaTable.forPath(syncer.spark, syncer.path("public.t")).history().collect()]
    assert ops[:3] == ["MERGE", "WRITE", "WRITE"]
    syncer.assert_equal("public.t")


@pytest.mark.parametrize("small_batch_keys,driver_keys", [(100_000, 2_000_000), (1, 2_000_000), (1, 0)],
                         ids=["driver finds and writes the rows", "driver finds, Spark writes", "Spark joins"])
def test_batches_mark_old_rows_deleted_and_write_only_the_changed_rows(db: psycopg.Connection, syncer, monkeypatch,
                                                                       small_batch_keys: int, driver_keys: int) -> None:
    """Both ways of finding a batch's old rows: on the driver (its keys read into the
    driver) and by a Spark join; with the rows written by the driver or by Spark."""
    from delta.tables import DeltaTable
    from pgcdc.engines.fast import driver_marks

    on_driver = []
    real = driver_marks.deletion_vectors
    monkeypatch.setattr(driver_marks, "deletion_vectors", lambda *a: on_driver.append(1) or real(*a))
    run = lambda: syncer.run(small_batch_keys=small_batch_keys, driver_keys=driver_keys)  # noqa: E731
    db.execute("create table t (id int primary key, v text)")
    db.execute("insert into t select i, 'x' from generate_series(1, 200) i")
    capture.attach(db, "t")
    syncer.run()
    copied = set(syncer.delta("public.t").inputFiles())

    def last_commit():
        return DeltaTable.forPath(syncer.spark, syncer.path("public.t")).history(1).collect()[0]

    db.execute("update t set v = 'y' where id <= 5")
    db.execute("delete from t where id in (6, 7)")
    db.execute("insert into t values (201, 'new'), (202, 'new'), (203, 'new')")
    report = run()["public.t"]
    assert (report.upserted, report.deleted) == (8, 2)
    syncer.assert_equal("public.t")
    commit = last_commit()
    assert commit.operation == "MERGE"
    assert commit.operationMetrics["numOutputRows"] == "8"  # only the changed rows were written
    assert commit.operationMetrics["numTargetDeletionVectorsAdded"] == str(len(copied))
    assert copied <= set(syncer.delta("public.t").inputFiles())  # the copied files stay, with deletion vectors

    # the same rows again (a deletion vector merged with the one already there), a key
    # inserted and deleted between two runs, then every row gone
    db.execute("update t set v = 'z' where id <= 6 or id = 201")
    db.execute("delete from t where id in (1, 202)")
    db.execute("insert into t values (300, 'gone')")
    db.execute("delete from t where id = 300")
    report = run()["public.t"]
    assert (report.upserted, report.deleted) == (5, 3)  # 2..5, 201 written; 1, 202, 300 have no row
    syncer.assert_equal("public.t")
    assert syncer.delta("public.t").groupBy("id").count().where("count > 1").count() == 0
    db.execute("delete from t")
    run()
    syncer.assert_equal("public.t")
    assert syncer.delta("public.t").count() == 0
    assert len(on_driver) == (3 if driver_keys > 0 else 0)


def test_a_composite_key_batch_is_found_and_written_on_the_driver(db: psycopg.Connection, syncer,
                                                                 monkeypatch) -> None:
    """A link table keyed by (int, text) takes the driver path as a one-column key does:
    its old rows found by the driver (one hash join of the stored key columns with the
    batch's keys), its rows written by the driver; a row is matched only when both columns
    match, across batches that merge deletion vectors and a key change in one column."""
    from pgcdc.engines.fast import driver_marks

    on_driver: list[int] = []
    real = driver_marks.deletion_vectors
    monkeypatch.setattr(driver_marks, "deletion_vectors", lambda *a: on_driver.append(1) or real(*a))
    wrote = driver_writes(monkeypatch)
    db.execute("create table film_actor (actor_id int, film_id text, note text, primary key (actor_id, film_id))")
    db.execute("insert into film_actor select i % 50, 'f' || (i / 50), 'x' from generate_series(0, 999) i")
    capture.attach(db, "film_actor")
    syncer.run()
    wrote.clear()  # (the first copy, written by the driver too)
    db.execute("delete from film_actor where (actor_id, film_id) in ((1, 'f0'), (2, 'f0'), (3, 'f1'), (4, 'f2'), "
               "(5, 'f3'))")
    db.execute("insert into film_actor values (1, 'f999', 'new'), (77, 'f0', 'new')")  # each column seen before
    db.execute("update film_actor set note = 'y' where actor_id = 6 and film_id = 'f4'")
    report = syncer.run()["public.film_actor"]
    assert (report.upserted, report.deleted, on_driver, wrote) == (3, 5, [1], [1])
    syncer.assert_equal("public.film_actor")
    db.execute("update film_actor set film_id = 'g' || film_id where actor_id = 6")  # the old keys: deleted
    db.execute("update film_actor set note = 'z' where (actor_id, film_id) in ((1, 'f999'), (77, 'f0'))")
    report = syncer.run()["public.film_actor"]
    assert (report.upserted, report.deleted, len(on_driver), len(wrote)) == (20 + 2, 20, 2, 2)
    syncer.assert_equal("public.film_actor")
    assert syncer.delta("public.film_actor").groupBy("actor_id", "film_id").count().where("count > 1").count() == 0


def test_large_batch_found_on_the_driver_across_files_and_dense_blocks(db: psycopg.Connection, syncer,
                                                                       monkeypatch) -> None:
    """A batch of many keys (above small_batch_keys: Spark writes its rows) has its old rows
    found on the driver: the key columns of several files searched in groups, and blocks
    where more than 4096 rows change stored as bitmaps. Any row marked at a wrong position
    leaves an old version behind or loses a live row."""
    from pgcdc.engines.fast import driver_marks

    searched: list[int] = []
    real = driver_marks.deletion_vectors
    monkeypatch.setattr(driver_marks, "deletion_vectors", lambda *a: searched.append(len(a[5])) or real(*a))
    db.execute("create table t (id bigint primary key, v text)")
    db.execute("insert into t select i, 'x' from generate_series(1, 150000) i")
    capture.attach(db, "t")
    syncer.run(jdbc_partitions=3)  # the copy: 3 files, ~50k rows each
    db.execute("update t set v = 'y' where id % 3 <> 0 and id < 100000")  # dense: 2 of 3 rows in most blocks
    db.execute("delete from t where id % 1000 = 1")                        # sparse
    db.execute("insert into t select i, 'new' from generate_series(150001, 150100) i")
    report = syncer.run(small_batch_keys=1000, jdbc_partitions=3, recopy_fraction=0)["public.t"]
    updated, deleted, both, inserted = 66666, 150, 67, 100
    assert searched == [updated + deleted - both + inserted]  # the batch's distinct keys
    assert (report.upserted, report.deleted) == (updated - both + inserted, deleted)
    syncer.assert_equal("public.t")
    db.execute("update t set v = 'z' where id between 40000 and 60000")  # rows in old and new files
    syncer.run(small_batch_keys=1000, jdbc_partitions=3, recopy_fraction=0)
    syncer.assert_equal("public.t")
    assert len(searched) == 2


def test_key_index_serves_later_batches_only_while_it_matches_its_data_file(db: psycopg.Connection, syncer,
                                                                            monkeypatch) -> None:
    """The driver path keeps each data file's key column beside the table (key_index): made
    when the driver writes a file or a batch first reads one, used by later batches, not used once it does not
    match the file, and deleted once VACUUM deleted the file."""
    import pyarrow as pa
    import pyarrow.ipc as ipc
    import pyarrow.parquet as pq

    parquet_reads: list[str] = []
    real_read = pq.read_table
    monkeypatch.setattr(pq, "read_table", lambda path, *a, **k: parquet_reads.append(Path(path).name)
                        or real_read(path, *a, **k))
    from pgcdc.sync import plan

    db.execute("create table t (id int primary key, v text)")
    db.execute("insert into t select i, 'x' from generate_series(1, 300) i")
    capture.attach(db, "t")
    with monkeypatch.context() as m:
        m.setattr(plan, "SMALL_TABLE", 0)  # copied by Spark: its file gets no index until a batch reads it
        syncer.run()
    keys_dir = Path(syncer.path("public.t"), "_pgcdc", "keys")

    def change(ids: str) -> set[str]:
        """Update the rows, ingest, compare; the names of the data files read from Parquet."""
        parquet_reads.clear()
        db.execute(f"update t set v = v || '.' where id in ({ids})")
        syncer.run()
        syncer.assert_equal("public.t")
        return set(parquet_reads)

    copied = change("1, 2, 3")  # the copied file holding them: read, and indexed
    assert len(copied) == 1 and f"{sorted(copied)[0]}.arrow" in {p.name for p in keys_dir.iterdir()}
    assert len(list(keys_dir.iterdir())) == 2  # and the batch's new file, indexed as the driver wrote it
    assert change("4, 5") == set()  # the copied file again: from its index
    assert change("1, 2") == set()  # the batch's file, where 1 and 2 live now: from the index made with it
    assert len(list(keys_dir.iterdir())) == 4

    # An index that does not match its file (here: its modification time one nanosecond
    # off, as if made from another file) is not used: with it, the batch would mark the
    # rows at the reversed keys' positions deleted, and leave the old versions of its own.
    index = keys_dir / f"{sorted(copied)[0]}.arrow"
    stored = ipc.open_file(pa.memory_map(str(index))).read_all()
    meta = dict(stored.schema.metadata)
    meta[b"pgcdc.file_mtime_ns"] = str(int(meta[b"pgcdc.file_mtime_ns"]) + 1).encode()
    reversed_keys = pa.array(stored.column(0).to_pylist()[::-1], stored.column(0).type)
    with ipc.new_file(str(index), stored.schema.with_metadata(meta)) as writer:
        writer.write_table(pa.table({"id": reversed_keys}).replace_schema_metadata(meta))
    assert sorted(copied)[0] in change("6, 7")  # read from Parquet again, index made again
    assert change("8, 9") == set()

    spark, path = syncer.spark, syncer.path("public.t")
    spark.sql(f"optimize delta.`{path}`")
    spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    spark.sql(f"vacuum delta.`{path}` retain 0 hours")
    assert all(not Path(path, p.name[:-len(".arrow")]).exists() for p in keys_dir.iterdir())
    syncer.run()  # nothing to apply: an idle pass does not look at the table, nor at its indexes
    compacted = change("10")  # the compacted file: read and indexed (and the batch's new file) ...
    assert len(compacted) == 1 and f"{compacted.pop()}.arrow" in {p.name for p in keys_dir.iterdir()}
    assert len(list(keys_dir.iterdir())) == 2  # ... and the indexes of the deleted files gone after it


def test_runs_compact_a_tables_small_files_once_there_are_enough(db: psycopg.Connection, syncer) -> None:
    """Every batch adds a file; a run that leaves a table with `compact_files` small files
    compacts them (Delta's OPTIMIZE, after its batches, beside the next table's batches, in a
    session of its own: no consumer state lands in its commit), and batches after it stay exact.
    (Engine auto: fast here, merge on the second pair, where scripts/compat.sh runs this test.)"""
    engine = "auto"
    from delta.tables import DeltaTable

    db.execute("create table t (id int primary key, v text)")
    db.execute("create table u (id int primary key, v text)")  # (synced after t: beside its compaction)
    db.execute("create table quiet (id int primary key)")
    db.execute("insert into t select i, 'v' || i from generate_series(1, 200) i")
    db.execute("insert into u select i, 'v' || i from generate_series(1, 200) i")
    db.execute("insert into quiet values (1)")
    for name in ("t", "u", "quiet"):
        capture.attach(db, name)
    syncer.run(engine=engine, compact_files=3)  # the copy: one file
    table = DeltaTable.forPath(syncer.spark, syncer.path("public.t"))

    def files() -> int:
        return int(table.detail().collect()[0]["numFiles"])

    def operations() -> list[str]:
        return [r.operation for r in table.history().orderBy("version").collect()]

    db.execute("update t set v = 'a' where id in (1, 150)")
    syncer.run(engine=engine, compact_files=3)
    assert files() == 2 and "OPTIMIZE" not in operations()  # 2 small files: not yet
    db.execute("update t set v = 'b' where id in (2, 151)")
    db.execute("delete from t where id = 3")
    db.execute("update u set v = 'b' where id < 100")
    syncer.run(engine=engine, compact_files=3)
    assert operations()[-1] == "OPTIMIZE" and files() == 1, operations()
    syncer.assert_equal("public.t")
    syncer.assert_equal("public.u")
    assert operations()[-2] == "MERGE"  # the batch itself, then its compaction
    optimized = table.history(1).collect()[0]
    commit = Path(syncer.path("public.t"), "_delta_log", f"{optimized.version:020d}.json").read_text()
    assert optimized.userMetadata is None and '"txn"' not in commit
    for i in range(4):  # batches on the compacted file; without compaction (0) the files pile up
        db.execute("update t set v = 'c' || %s where id in (%s, %s)", (i, 10 + i, 160 + i))
        syncer.run(engine=engine, compact_files=0)
    assert files() == 5 and operations().count("OPTIMIZE") == 1
    syncer.assert_equal("public.t")
    quiet = DeltaTable.forPath(syncer.spark, syncer.path("public.quiet"))
    assert [r.operation for r in quiet.history().collect()] != [] and \
        "OPTIMIZE" not in {r.operation for r in quiet.history().collect()}  # (no batches: left alone)


def test_a_run_through_a_long_backlog_compacts_on_the_way(db: psycopg.Connection, syncer) -> None:
    """Many small transactions applied one batch each: the run compacts the table's small
    files every `compact_files` batches, between batches, not only at its end, so a batch
    never works over more small files than about twice that; the result stays exact."""
    from delta.tables import DeltaTable

    db.execute("create table t (id int primary key, v text)")
    db.execute("insert into t select i, 'v' from generate_series(1, 50) i")
    capture.attach(db, "t")
    syncer.run()
    for i in range(13):  # 13 transactions, one batch each
        db.execute("update t set v = %s where id = %s", (f"w{i}", i + 1))
    report = syncer.run(max_events_per_batch=1, compact_files=4)["public.t"]
    assert report.batches == 13
    ops = [r.operation for r in DeltaTable.forPath(syncer.spark, syncer.path("public.t")).history()
           .orderBy("version").collect()]
    merges_before = [ops[:i].count("MERGE") for i, op in enumerate(ops) if op == "OPTIMIZE"]
    assert len(merges_before) >= 3 and merges_before[0] <= 8, ops  # during the run, not only after it
    run = 0
    for op in ops[ops.index("MERGE"):]:  # never more than 2 x compact_files batches without a compaction
        run = 0 if op == "OPTIMIZE" else run + 1
        assert run <= 8, ops
    syncer.assert_equal("public.t")
