"""What lands beside the columns (docs/columns.md): soft deletes (`[target] deletes = "soft"`).

The oracle reads PostgreSQL with psycopg and Delta with the plain Spark session.
"""

from __future__ import annotations

import psycopg
import pytest

from pgcdc.source import capture

SOFT = {"target": {"deletes": "soft"}}


def _delta(syncer, table: str = "app.t") -> dict[int, tuple]:
    """id -> (v, deleted, deleted_at) as the plain Delta reader sees them."""
    rows = syncer.delta(table).select("id", "v", "_pgcdc_deleted", "_pgcdc_deleted_at").collect()
    assert len(rows) == len({r.id for r in rows}), "a key lands once"
    return {r.id: (r.v, r._pgcdc_deleted, r._pgcdc_deleted_at) for r in rows}


def _pg(db: psycopg.Connection) -> dict[int, int]:
    return dict(db.execute("select id, v from app.t").fetchall())


def _check(syncer, db: psycopg.Connection, last: dict[int, int]) -> dict[int, tuple]:
    """Delta holds PostgreSQL's rows live and every other key it ever synced marked deleted with
    the values it last synced (`last`: id -> v as last synced, updated here)."""
    delta, pg = _delta(syncer), _pg(db)
    live = {k: v for k, (v, deleted, at) in delta.items() if not deleted}
    assert live == pg
    assert all(at is None for _, deleted, at in delta.values() if not deleted)
    gone = {k: v for k, (v, deleted, at) in delta.items() if deleted}
    assert all(delta[k][2] is not None for k in gone)
    assert gone == {k: last[k] for k in set(last) - set(pg)}
    last.update(pg)
    return delta


@pytest.mark.parametrize("engine", ["merge", "fast"])
def test_a_deleted_row_stays_with_its_last_values_and_comes_back_when_inserted_again(db: psycopg.Connection,
                                                                                     syncer, engine: str) -> None:
    """With each engine: the merge engine updates a gone key's row in place, the fast engine
    writes it again, marked (engines/fast/landed.py)."""
    opts = SOFT | {"engine": engine}
    db.execute("create schema app; create table app.t (id int primary key, v int, s text)")
    db.execute("insert into app.t select i, i, 's' || i from generate_series(1, 40) i")
    capture.attach(db, "app.t")
    syncer.run(**opts)
    last = dict(_pg(db))
    _check(syncer, db, last)
    db.execute("update app.t set v = -v where id in (1, 2)")
    syncer.run(**opts)
    _check(syncer, db, last)
    db.execute("update app.t set v = 100 where id = 2")  # changed, then deleted, in one batch:
    db.execute("delete from app.t where id in (2, 3, 4)")  # its last synced value (-2) stays
    db.execute("insert into app.t values (41, 41, 'new'), (42, 42, 'gone before it was synced')")
    db.execute("delete from app.t where id = 42")
    lines = len(syncer.lines)
    syncer.run(**opts)
    assert any(f"engine {engine}: as configured" in line for line in syncer.lines[lines:])
    first = _check(syncer, db, last)
    assert first[2][0] == -2 and 42 not in first
    db.execute("insert into app.t values (3, 300, 'back')")  # re-inserted: live again
    db.execute("insert into app.t values (4, 4, 'x'); delete from app.t where id = 4")  # gone again: marked as before
    syncer.run(**opts)
    again = _check(syncer, db, last)
    assert again[3] == (300, False, None) and again[4] == first[4]
    db.execute("truncate app.t")  # every row marked
    syncer.run(**opts)
    truncated = _check(syncer, db, last)
    assert all(deleted for _, deleted, _ in truncated.values()) and truncated[4] == first[4]


def test_a_copy_in_chunks_keeps_the_marked_rows_and_marks_those_it_no_longer_finds(db: psycopg.Connection,
                                                                                  syncer) -> None:
    """A resync (here, a batch past recopy_fraction) in chunks: rows marked already stay as they
    are; rows deleted meanwhile are marked; nothing live is lost."""
    db.execute("create schema app; create table app.t (id int primary key, v int, s text)")
    db.execute("insert into app.t select i, i, 's' || i from generate_series(1, 600) i")
    capture.attach(db, "app.t")
    opts = SOFT | {"copies": {"chunk_rows": 100, "chunk_seconds": 0}}
    syncer.run(**opts)
    last = dict(_pg(db))
    db.execute("delete from app.t where id % 10 = 0")
    syncer.run(**opts)
    before = _check(syncer, db, last)
    db.execute("delete from app.t where id % 10 = 1")
    db.execute("update app.t set v = v + 1000 where id % 10 = 2")
    db.execute("insert into app.t select i, i, 'n' from generate_series(601, 650) i")
    syncer.run(**opts, recopy_fraction=0.01)  # copied again, in chunks
    after = _check(syncer, db, last)
    assert all(after[k] == before[k] for k in before if k % 10 == 0)


def test_switching_to_soft_deletes_copies_the_table_and_verify_compares_live_rows(db: psycopg.Connection,
                                                                                   syncer) -> None:
    from pgcdc.source.db import connect
    from pgcdc.checks import verify as verify_mod

    db.execute("create schema app; create table app.t (id int primary key, v int, s text)")
    db.execute("insert into app.t select i, i, 's' || i from generate_series(1, 30) i")
    capture.attach(db, "app.t")
    syncer.run()  # a plain mirror first
    assert "_pgcdc_deleted" not in syncer.delta("app.t").columns
    db.execute("delete from app.t where id <= 5")
    report = syncer.run(**SOFT)["app.t"]  # the Delta table takes pgcdc's columns: a copy of the 25 rows
    assert report.copied == 25            # it finds, which marks the 5 the mirror held and PostgreSQL no longer has
    last = {k: k for k in range(1, 31)}
    _check(syncer, db, last)
    db.execute("delete from app.t where id <= 10")
    syncer.run(**SOFT)
    _check(syncer, db, last)
    with connect(syncer.dsn, reader=True) as reader:
        results = verify_mod.verify(syncer.spark, reader, str(syncer.root), capture.list_attached(reader))
    assert [r.equal for r in results] == [True], [r.line() for r in results]
    db.execute("update app.t set v = 0 where id = 20")
    syncer.run(**SOFT, engine="fast")
    _check(syncer, db, last)
    syncer.run()  # back to hard deletes, nothing pending: a copy without the marked rows and pgcdc's columns
    assert syncer.delta("app.t").columns == ["id", "v", "s"] and syncer.delta("app.t").count() == 20
    assert dict(syncer.delta("app.t").select("id", "v").collect()) == _pg(db)


def _txid(db: psycopg.Connection, *statements: str) -> int:
    """Run `statements` in one transaction; its txid."""
    with db.transaction():
        for statement in statements:
            db.execute(statement)
        return int(db.execute("select pg_current_xact_id()::text::bigint").fetchone()[0])


@pytest.mark.parametrize("engine", ["merge", "fast"])
def test_metadata_columns_say_when_and_up_to_which_txid_each_row_was_written(db: psycopg.Connection,
                                                                             syncer, engine: str) -> None:
    """A copy writes its watermark and one time into every row; a batch writes, into each row it
    changes (a soft delete's mark included), the greatest txid of its key's changes and its
    commit's time, later than the last commit's; the rows it leaves alone keep theirs. An
    incremental reader that keeps the greatest _pgcdc_synced_at it saw reads exactly the rows
    each later commit wrote."""
    opts = {"target": {"deletes": "soft", "metadata_columns": True}, "mode": "strict", "engine": engine}
    db.execute("create schema app; create table app.t (id int primary key, v int, s text)")
    inserted = _txid(db, "insert into app.t select i, i, 's' || i from generate_series(1, 20) i")
    capture.attach(db, "app.t")
    syncer.run(**opts)

    def rows() -> dict[int, tuple]:
        frame = syncer.delta("app.t").select("id", "v", "_pgcdc_deleted", "_pgcdc_synced_at", "_pgcdc_txid")
        return {r.id: (r.v, r._pgcdc_deleted, r._pgcdc_synced_at, r._pgcdc_txid) for r in frame.collect()}
    copied = rows()
    assert len({(at, txid) for _, _, at, txid in copied.values()}) == 1  # one commit, one watermark
    assert inserted < next(iter(copied.values()))[3] <= syncer.watermark("app.t")  # the copy's watermark
    seen = max(at for _, _, at, _ in copied.values())
    first = _txid(db, "update app.t set v = 100 where id in (1, 2)")
    second = _txid(db, "update app.t set v = 200 where id = 2", "delete from app.t where id = 3")
    syncer.run(**opts)
    after = rows()
    assert after[1][3] == first and after[2][3] == second and after[3][3] == second and after[3][1] is True
    assert {k for k, (_, _, at, _) in after.items() if at > seen} == {1, 2, 3}  # the incremental reader's rows
    assert all(after[k] == copied[k] for k in range(4, 21))
    seen = max(at for _, _, at, _ in after.values())
    third = _txid(db, "update app.t set v = 300 where id = 1", "insert into app.t values (3, 3, 'back')")
    syncer.run(**opts)
    last = rows()
    assert {k for k, (_, _, at, _) in last.items() if at > seen} == {1, 3}
    assert last[1][3] == third > after[1][3] and last[3][1:4:2] == (False, third)  # strict: per key, txids rise


def test_a_copy_reads_postgres_rows_once_so_a_truncate_between_reads_cannot_lose_a_row(spark, tmp_path) -> None:
    """A TRUNCATE is not MVCC-safe: two reads of one exported snapshot can differ (rows, then
    none). Landing.copied must read the copy's rows once: here they come from a source that
    gives its rows to the first read only, and every old key must come out live or marked."""
    from pyspark.sql.types import IntegerType, StructField, StructType

    from pgcdc.lake.landing import Landing

    reads = tmp_path / "reads"
    reads.write_text("0")

    def first_read_only(_: object) -> list[tuple[int, int]]:
        n = int(reads.read_text())
        reads.write_text(str(n + 1))
        return [(k, k * 10) for k in range(1, 6)] if n == 0 else []
    schema = StructType([StructField("id", IntegerType()), StructField("v", IntegerType())])
    rows = spark.createDataFrame(spark.sparkContext.parallelize([0], 1).flatMap(first_read_only), schema)
    old = spark.createDataFrame([(k, k, False, None) for k in range(1, 9)],
                                "id int, v int, _pgcdc_deleted boolean, _pgcdc_deleted_at timestamp")
    out = {r.id: (r.v, r._pgcdc_deleted) for r in Landing(soft_deletes=True).copied(rows, old, ["id"], 7).collect()}
    assert int(reads.read_text()) == 1
    assert out == {1: (10, False), 2: (20, False), 3: (30, False), 4: (40, False), 5: (50, False),
                   6: (6, True), 7: (7, True), 8: (8, True)}
