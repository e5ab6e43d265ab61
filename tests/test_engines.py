"""The two apply engines (pgcdc/engines): the public-API merge engine applies what the fast
one does; the change data feed, row tracking and copy-on-write targets; which engine a run
takes, and why. The oracle reads PostgreSQL with psycopg and Delta with Spark's reader
(or delta-rs), never through pgcdc's code."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest

from pgcdc.source import capture
from pgcdc.errors import ConfigError


def _rows(db: psycopg.Connection, table: str) -> set[tuple]:
    return set(db.execute(f"select * from {table}").fetchall())


def _delta_rows(syncer, table: str) -> set[tuple]:
    return {tuple(r) for r in syncer.delta(table).collect()}


def _merge_because(syncer, reason: str) -> str:
    """The line a run prints for a table auto gives to the merge engine for `reason` (on a Delta
    build the fast engine was not tested with, scripts/compat.sh, that reason comes first)."""
    from pgcdc.engines import delta_version, fast

    return f"public.{{}}: engine merge: {fast.untested(delta_version(syncer.spark)) or reason}"


def _log(path: str, version: int) -> list[dict]:
    return [json.loads(line) for line in Path(path, "_delta_log", f"{version:020d}.json").read_text().splitlines()]


@pytest.mark.parametrize("key", ["bigint", "text", "composite"])
def test_merge_engine_applies_inserts_updates_deletes_and_key_changes(db: psycopg.Connection, syncer,
                                                                        key: str) -> None:
    """Each batch is one MERGE commit carrying the consumer's txn version and state; a key
    change is a delete plus an insert; the result equals PostgreSQL."""
    if key == "composite":
        db.execute("create table t (r text, n int, v text, primary key (r, n))")
        db.execute("insert into t select 'r' || (i % 3), i, 'a' from generate_series(1, 200) i")
    else:
        db.execute(f"create table t (id {key} primary key, v text)")
        db.execute(f"insert into t select i::{key}, 'a' from generate_series(1, 200) i")
    capture.attach(db, "t")
    syncer.run(engine="merge")
    col = "n" if key == "composite" else "id"
    db.execute(f"update t set v = 'b' where {col}::int % 7 = 0")
    db.execute(f"delete from t where {col}::int % 11 = 0")  # (before the key change: text keys turn non-numeric)
    db.execute(f"update t set {col} = {col} || 'x' where {col} = '13'" if key == "text" else
               f"update t set {col} = {col} + 1000 where {col}::int = 13")
    db.execute("insert into t select * from t where false")  # (an empty statement: no event)
    db.execute("insert into t values ('r9', 5000, 'new')" if key == "composite" else
               f"insert into t values (5000::{key}, 'new')")
    syncer.lines.clear()
    report = syncer.run(engine="merge")["public.t"]
    assert "public.t: engine merge: as configured (ingest.engine)" in syncer.lines
    assert report.batches == 1 and report.deleted == 200 // 11 + 1
    assert _delta_rows(syncer, "public.t") == _rows(db, "t")
    path = syncer.path("public.t")
    version = max(int(p.stem) for p in Path(path, "_delta_log").glob("*.json"))
    actions = _log(path, version)
    info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
    assert info["operation"] == "MERGE"
    assert json.loads(info["userMetadata"])["batch"] == 2
    assert {"appId": "pgcdc:test", "version": 2} == {k: v for k, v in
                                                    next(a["txn"] for a in actions if "txn" in a).items()
                                                    if k != "lastUpdated"}
    assert any(a.get("add", {}).get("deletionVector") for a in actions)  # the table has deletion vectors
    assert syncer.run(engine="merge")["public.t"].events == 0
    assert syncer.commits("public.t") == version + 1


def test_batch_number_taken_by_another_writer_is_not_applied_twice(db: psycopg.Connection, syncer) -> None:
    """A job that committed the consumer's next batch number (a second, misconfigured one):
    the merge engine refuses the batch, naming it, and commits nothing."""
    db.execute("create table t (id int primary key, v text)")
    db.execute("insert into t values (1, 'a')")
    capture.attach(db, "t")
    syncer.run(engine="merge")
    path = syncer.path("public.t")
    syncer.spark.range(0).selectExpr("cast(id as int) id", "'x' v").write.format("delta").mode("append") \
        .option("txnAppId", "pgcdc:test").option("txnVersion", 2).save(path)
    db.execute("insert into t values (2, 'b')")
    commits = syncer.commits("public.t")
    from pgcdc.errors import TargetError
    with pytest.raises(TargetError, match="batch 2 of consumer test"):
        syncer.run(engine="merge")
    assert syncer.commits("public.t") == commits
    assert syncer.delta("public.t").where("id = 2").count() == 0


def test_change_data_feed_shows_what_happened_in_postgres(db: psycopg.Connection, syncer) -> None:
    """On a `change_data_feed = true` table an UPDATE of one row reads back as exactly one
    update_preimage and one update_postimage; an insert, a delete and a primary-key change
    (a delete plus an insert) read back as such; auto applies it with the merge engine."""
    db.execute("create table t (id int primary key, v text)")
    db.execute("insert into t select i, 'a' from generate_series(1, 50) i")
    capture.attach(db, "t")
    cdf = {"target": {"change_data_feed": True}}
    syncer.run(**cdf)
    path = syncer.path("public.t")
    first = max(int(p.stem) for p in Path(path, "_delta_log").glob("*.json")) + 1
    db.execute("update t set v = 'b' where id = 1")
    db.execute("insert into t values (100, 'new')")
    db.execute("delete from t where id = 2")
    db.execute("update t set id = 300 where id = 3")
    syncer.lines.clear()
    syncer.run(**cdf)
    assert _merge_because(syncer, "the table has the change data feed on (delta.enableChangeDataFeed)").format("t") \
        in syncer.lines
    changes = sorted((r.id, r.v, r._change_type) for r in syncer.spark.read.format("delta")
                     .option("readChangeFeed", "true").option("startingVersion", first).load(path).collect())
    assert changes == sorted([(1, "a", "update_preimage"), (1, "b", "update_postimage"), (100, "new", "insert"),
                              (2, "a", "delete"), (3, "a", "delete"), (300, "a", "insert")])
    assert _delta_rows(syncer, "public.t") == _rows(db, "t")
    # a copy (here for a TRUNCATE) shows as a delete of every row held and an insert of every row copied
    held = _delta_rows(syncer, "public.t")
    copied_from = max(int(p.stem) for p in Path(path, "_delta_log").glob("*.json")) + 1
    db.execute("truncate t")
    db.execute("insert into t values (7, 'x'), (8, 'y')")
    syncer.run(**cdf)
    changes = sorted((r.id, r.v, r._change_type) for r in syncer.spark.read.format("delta")
                     .option("readChangeFeed", "true").option("startingVersion", copied_from).load(path).collect())
    assert changes == sorted([(i, v, "delete") for i, v in held] + [(7, "x", "insert"), (8, "y", "insert")])
    # (on a Delta build the fast engine was not tested with, it refuses before looking at the table)
    db.execute("insert into t values (9, 'z')")  # (an idle table is passed before any engine is chosen)
    with pytest.raises(Exception, match="change data feed|not a version the fast engine was tested with"):
        syncer.run(engine="fast", **cdf)


def test_row_tracking_keeps_row_ids_through_updates(db: psycopg.Connection, syncer) -> None:
    db.execute("create table t (id int primary key, v text)")
    db.execute("insert into t select i, 'a' from generate_series(1, 20) i")
    capture.attach(db, "t")
    rt = {"target": {"row_tracking": True}}
    syncer.run(**rt)

    def ids() -> dict[int, int]:
        return {r.id: r.row_id for r in syncer.delta("public.t").select("id", "_metadata.row_id").collect()}
    before = ids()
    db.execute("update t set v = 'b' where id in (1, 2)")
    db.execute("insert into t values (21, 'c')")
    syncer.lines.clear()
    syncer.run(**rt)
    assert _merge_because(syncer, "the table has row tracking (delta.enableRowTracking)").format("t") in syncer.lines
    after = ids()
    assert {k: after[k] for k in before} == before
    assert after[21] not in before.values()
    assert _delta_rows(syncer, "public.t") == _rows(db, "t")


def test_copy_on_write_target_reads_equal_through_delta_rs(db: psycopg.Connection, syncer) -> None:
    """`deletion_vectors = false` makes tables delta-rs's to_pyarrow_table() reads (it refuses
    deletion vectors); a table with them reads equal through its QueryBuilder."""
    from deltalake import DeltaTable, QueryBuilder

    for name in ("cow", "dv"):
        db.execute(f"create table {name} (id int primary key, v text, d date)")
        db.execute(f"insert into {name} select i, 'a' || i, date '2024-01-01' + i from generate_series(1, 100) i")
        capture.attach(db, name)
    syncer.run(tables=["public.cow"], target={"deletion_vectors": False})
    syncer.run(tables=["public.dv"])
    for name in ("cow", "dv"):
        db.execute(f"update {name} set v = 'b' where id % 5 = 0")
        db.execute(f"delete from {name} where id % 7 = 0")
        db.execute(f"insert into {name} values (500, null, null)")
    syncer.lines.clear()
    syncer.run(tables=["public.cow"], target={"deletion_vectors": False})
    syncer.run(tables=["public.dv"])
    assert _merge_because(syncer, "the table has no deletion vectors (delta.enableDeletionVectors)").format("cow") \
        in syncer.lines
    cow = DeltaTable(syncer.path("public.cow"))
    assert "deletionVectors" not in (cow.protocol().reader_features or [])
    assert {tuple(r.values()) for r in cow.to_pyarrow_table().to_pylist()} == _rows(db, "cow")
    dv = DeltaTable(syncer.path("public.dv"))
    with pytest.raises(Exception, match="deletionVectors"):
        dv.to_pyarrow_table()
    read = QueryBuilder().register("t", dv).execute("select id, v, d from t").read_all()
    import pyarrow as pa

    assert {tuple(r.values()) for r in pa.table(read).to_pylist()} == _rows(db, "dv")


def test_untested_delta_version_runs_merge_and_fast_refuses_in_one_line(db: psycopg.Connection, syncer,
                                                                          monkeypatch) -> None:
    """On a Delta build the fast engine was not tested with (the running one under
    scripts/compat.sh; elsewhere the tested list is narrowed to pretend so), auto applies
    with merge and says why; engine fast refuses at start-up, before any table is touched."""
    from pgcdc.engines import delta_version, fast

    version = delta_version(syncer.spark)
    if version in fast.TESTED_DELTA:
        monkeypatch.setattr(fast, "TESTED_DELTA", ("3.9.9",))
    why = f"Delta {version} is not a version the fast engine was tested with ({', '.join(fast.TESTED_DELTA)})"
    db.execute("create table t (id int primary key, v text)")
    db.execute("insert into t values (1, 'a')")
    capture.attach(db, "t")
    syncer.run()
    db.execute("update t set v = 'b'")
    commits = syncer.commits("public.t")
    with pytest.raises(ConfigError) as refused:
        syncer.run(engine="fast")
    assert "\n" not in str(refused.value)
    assert why in str(refused.value) and 'ingest.engine = "merge"' in str(refused.value)
    assert syncer.commits("public.t") == commits
    syncer.lines.clear()
    syncer.run()
    assert f"public.t: engine merge: {why}" in syncer.lines
    assert _delta_rows(syncer, "public.t") == _rows(db, "t")
