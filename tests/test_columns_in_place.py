"""Column changes of an attached table land in its Delta table in place (lake/evolve.py), against
a real PostgreSQL and Spark + Delta: no row read from PostgreSQL (its own counters say so), Delta
equal to PostgreSQL after, and a copy where only a copy is right."""

from __future__ import annotations

import time

import psycopg
import pytest

from fixtures.ingest import Syncer, disable_event_triggers
from pgcdc.source import capture

ROWS = 2000


def _table(db: psycopg.Connection) -> None:
    db.execute("create table t (id int primary key, v text, n numeric(10,2), s varchar(10))")
    db.execute(f"insert into t select i, 'v' || i, i / 3.0, 's' || (i % 7) from generate_series(1, {ROWS}) i")
    db.execute("analyze t")  # (the application's UPDATEs below then read by index: the counters count them too)
    capture.attach(db, "t")


def _rows_read(db: psycopg.Connection) -> int:
    """Rows of t PostgreSQL read so far, by scan or index (its statistics, once the readers'
    sessions have reported them)."""
    db.execute("select pg_stat_force_next_flush()")  # (this session's own statements: the DDL, the UPDATEs)
    time.sleep(1.2)  # (another session reports its counters when it ends or within a second when idle)
    db.execute("select pg_stat_clear_snapshot()")
    return int(db.execute("select coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) from pg_stat_user_tables "
                          "where relid = 't'::regclass").fetchone()[0])


def _in_place(db: psycopg.Connection, syncer: Syncer, *ddl: str) -> list[str]:
    """Run the DDL between two syncs; return what the second said, having checked that it read
    next to no row of t from PostgreSQL (a copy reads all of them) and that Delta equals PostgreSQL."""
    syncer.run()
    for statement in ddl:
        db.execute(statement)
    before, said = _rows_read(db), len(syncer.lines)
    syncer.run()
    read = _rows_read(db) - before
    lines = syncer.lines[said:]
    assert not any("copying" in line for line in lines), lines
    assert read < ROWS / 10, (read, "\n".join(lines))
    syncer.assert_equal("public.t")
    return lines


def test_a_column_added_without_a_default_is_null_in_existing_rows_without_a_data_file(
        db: psycopg.Connection, syncer: Syncer) -> None:
    _table(db)
    lines = _in_place(db, syncer, "alter table t add column note text",
                      "update t set note = 'filled' where id <= 10")
    assert any("columns changed in place (added note), without writing a data file" in line for line in lines), lines
    ops = [r.operation for r in syncer.spark.sql(f"describe history delta.`{syncer.path('public.t')}`").collect()]
    assert "WRITE" not in ops[:ops.index("ADD COLUMNS")], ops  # (newest first: the first sync's copy is a WRITE)


def test_a_column_added_with_a_constant_default_then_filled_leaves_no_null(db: psycopg.Connection,
                                                                           syncer: Syncer) -> None:
    """airbyte #80920's case: ADD COLUMN with a default, an UPDATE filling it right after, a sync."""
    _table(db)
    lines = _in_place(db, syncer, "alter table t add column flag int not null default 7",
                      "update t set flag = id where id % 50 = 0",
                      "alter table t add column at timestamptz default '2024-05-06 07:08:09+02'")
    assert any("added flag (existing rows: 7)" in line for line in lines), lines
    assert syncer.delta("public.t").where("flag is null or at is null").count() == 0


def test_a_row_marked_deleted_keeps_null_in_a_column_added_with_a_default_after_it(
        db: psycopg.Connection, syncer: Syncer) -> None:
    """With soft deletes, a row deleted before ADD COLUMN ... DEFAULT never held the default: it
    keeps its last synced values, NULL in the new column (found by the randomized test, seed 69);
    the live rows hold the default, in place."""
    _table(db)
    soft = {"target": {"deletes": "soft"}}
    syncer.run(**soft)
    db.execute("delete from t where id <= 5")
    syncer.run(**soft)
    db.execute("alter table t add column flag int not null default 7")
    syncer.run(**soft)
    assert not any("copying" in line for line in syncer.lines[-3:]), syncer.lines[-3:]
    marked = {(r.id, r.flag) for r in syncer.delta("public.t").where("_pgcdc_deleted").collect()}
    assert marked == {(i, None) for i in range(1, 6)}, marked
    live = syncer.delta("public.t").where("not _pgcdc_deleted")
    assert live.count() == ROWS - 5 and live.where("flag is distinct from 7").count() == 0


def test_dropped_renamed_and_widened_columns_rewrite_delta_from_itself(db: psycopg.Connection,
                                                                       syncer: Syncer) -> None:
    _table(db)
    lines = _in_place(db, syncer, "alter table t drop column s", "alter table t rename column v to label",
                      "alter table t alter column n type numeric(14,2)",  # (more digits: no rewrite in PostgreSQL)
                      "update t set n = 123456789012.25 where id = 5")
    line = next(x for x in lines if "columns changed in place" in x)
    assert "renamed v -> label" in line and "widened n decimal(10,2) -> decimal(14,2)" in line and "dropped s" in line
    assert "rewriting its Delta table from itself" in line
    assert syncer.delta("public.t").where("id = 5").first()["n"] == pytest.approx(123456789012.25)


def test_drops_and_renames_of_a_big_table_go_by_column_mapping_without_a_data_file(
        db: psycopg.Connection, syncer: Syncer, monkeypatch: pytest.MonkeyPatch) -> None:
    """A table over evolve.MAPPING_BYTES (0 here): column mapping turned on, the drop and the renames
    (one to the dropped column's name) metadata alone; a column dropped and added again under its
    name holds NULL, not its old values; delta-rs reads it equal; `column_mapping = "off"` rewrites."""
    import pyarrow as pa
    from deltalake import DeltaTable, QueryBuilder

    from pgcdc.lake import evolve

    monkeypatch.setattr(evolve, "MAPPING_BYTES", 0)
    _table(db)
    lines = _in_place(db, syncer, "alter table t drop column s", "alter table t rename column v to s",
                      "alter table t add column note text", "update t set note = 'x' where id <= 3")
    line = next(x for x in lines if "columns changed in place" in x)
    assert "dropped s" in line and "renamed v -> s" in line and "by column mapping, without writing a data file" in line
    path = syncer.path("public.t")
    ops = [r.operation for r in syncer.spark.sql(f"describe history delta.`{path}`").collect()]
    assert "WRITE" not in ops[:ops.index("DROP COLUMNS")], ops  # (newest first: the first sync's copy is a WRITE)
    lines = _in_place(db, syncer, "alter table t drop column n", "alter table t add column n numeric(10,2)",
                      "update t set n = 1.5 where id = 2")
    assert any("by column mapping" in x for x in lines), lines
    assert syncer.delta("public.t").where("n is not null").count() == 1
    read = QueryBuilder().register("t", DeltaTable(path)).execute("select id, s, note, n from t").read_all()
    assert {tuple(r.values()) for r in pa.table(read).to_pylist()} == \
        set(db.execute("select id, s, note, n from t").fetchall())
    lines = _in_place(db, syncer, "alter table t rename column note to remark")
    assert any("renamed note -> remark" in x and "by column mapping" in x for x in lines), lines
    # the key renamed: the fast engine (where it runs) finds the stored rows by the key's physical name, still "id"
    lines = _in_place(db, syncer, "alter table t rename column id to ident",
                      "update t set remark = 'y' where ident <= 5", "delete from t where ident = 7")
    assert any("renamed id -> ident" in x for x in lines) and any(" applied by " in x for x in lines), lines
    db.execute("update t set remark = 'z' where ident between 10 and 12")
    syncer.run()
    syncer.assert_equal("public.t")


def test_with_column_mapping_off_a_big_tables_drop_is_rewritten(
        db: psycopg.Connection, syncer: Syncer, monkeypatch: pytest.MonkeyPatch) -> None:
    from pgcdc.lake import evolve

    monkeypatch.setattr(evolve, "MAPPING_BYTES", 0)
    _table(db)
    syncer.run(target={"column_mapping": "off"})
    db.execute("alter table t drop column s")
    said = len(syncer.lines)
    syncer.run(target={"column_mapping": "off"})
    assert any("dropped s" in x and "rewriting its Delta table from itself" in x for x in syncer.lines[said:])
    configuration = syncer.spark.sql(f"describe detail delta.`{syncer.path('public.t')}`").first()["properties"]
    assert configuration.get("delta.columnMapping.mode", "none") == "none", configuration
    syncer.assert_equal("public.t")


def test_a_column_dropped_and_added_again_under_its_name_holds_the_new_values(db: psycopg.Connection,
                                                                             syncer: Syncer) -> None:
    """Same name, same type, another column (another attnum): the old values must not stay."""
    _table(db)
    syncer.run()
    syncer.run()  # (the columns' numbers are recorded by now)
    lines = _in_place(db, syncer, "alter table t drop column v", "alter table t add column v text default 'again'")
    assert any("dropped v" in line and "added v (existing rows: 'again')" in line for line in lines), lines


@pytest.mark.parametrize("cuts", [False, True])
def test_a_column_added_while_a_batch_reads_lands_in_place_before_the_batch(
        db: psycopg.Connection, syncer: Syncer, monkeypatch: pytest.MonkeyPatch, cuts: bool) -> None:
    """The DDL commits after the run checked the columns and before its batch reads the rows.
    Without a cut the read sees the new columns and fails (pgcdc._columns_are): the run changes
    Delta in place and applies the batch with them. In a cut the batch reads as of the pass's
    snapshot, the columns as they were, and the next run changes Delta. Either way the row
    written after the ADD keeps its value, not the default."""
    import pgcdc.faults

    _table(db)
    syncer.run()
    db.execute("update t set v = 'changed' where id <= 3")
    other = psycopg.connect(syncer.dsn, autocommit=True)

    def act(name: str) -> None:
        if name == "before-merge" and not other.closed:
            other.execute("alter table t add column flag int default 7")
            other.execute("update t set flag = 99 where id = 2")
            other.close()
    monkeypatch.setattr(pgcdc.faults, "failpoint", act)
    said = len(syncer.lines)
    syncer.run(cuts=cuts)
    monkeypatch.undo()
    changed = [line for line in syncer.lines[said:] if "added flag (existing rows: 7)" in line]
    assert bool(changed) != cuts, syncer.lines[said:]
    syncer.run(cuts=cuts)
    assert any("added flag (existing rows: 7)" in line for line in syncer.lines[said:]), syncer.lines[said:]
    assert not any("copying" in line for line in syncer.lines[said:]), syncer.lines[said:]
    syncer.assert_equal("public.t")
    assert syncer.delta("public.t").where("id = 2").first()["flag"] == 99


def test_a_default_postgresql_no_longer_keeps_apart_is_copied(db: psycopg.Connection, syncer: Syncer) -> None:
    """After VACUUM FULL the catalog no longer says what older rows hold: a copy, said, and the
    counters show it read every row (the check above can fail)."""
    _table(db)
    syncer.run()
    db.execute("alter table t add column flag int default 7")
    db.execute("vacuum full t")
    before = _rows_read(db)
    syncer.run()
    assert _rows_read(db) - before >= ROWS
    assert any("was added with a default whose value in older rows" in line and "copying" in line
               for line in syncer.lines), syncer.lines
    syncer.assert_equal("public.t")


def test_without_the_ddl_guard_columns_change_in_place_too(db: psycopg.Connection, syncer: Syncer) -> None:
    disable_event_triggers(db)
    _table(db)
    lines = _in_place(db, syncer, "alter table t add column note text default 'x'", "alter table t drop column s")
    assert any("added note (existing rows: 'x')" in line and "dropped s" in line for line in lines), lines


def test_int_to_bigint_rewritten_by_postgresql_widens_in_place(db: psycopg.Connection, syncer: Syncer) -> None:
    """PostgreSQL rewrites the table for int -> bigint; one ALTER TABLE without USING that only
    widens queues no copy (pgcdc._on_rewrite), and the Delta table's column is cast in place."""
    _table(db)
    db.execute("alter table t add column c int not null default 5")
    syncer.run()
    queued = db.execute("select count(*) from pgcdc.commit_queue where op = 'T'").fetchone()[0]
    lines = _in_place(db, syncer, "alter table t alter column c type bigint, alter column n type numeric(16,4)",
                      "update t set c = 5000000000 where id = 7")
    assert db.execute("select count(*) from pgcdc.commit_queue where op = 'T'").fetchone()[0] == queued
    assert any("widened c int -> bigint" in line and "widened n decimal(10,2) -> decimal(16,4)" in line
               for line in lines), lines


def test_a_retype_postgresql_rewrote_the_table_for_is_copied(db: psycopg.Connection, syncer: Syncer) -> None:
    """A retype that rewrites the table (USING here; int -> bigint rewrites it too) fires no
    capture trigger; the rewrite guard queues a copy, which lands the new values."""
    _table(db)
    syncer.run()
    db.execute("alter table t alter column v type text using upper(v)")
    syncer.run()
    assert any("copying" in line for line in syncer.lines), syncer.lines
    syncer.assert_equal("public.t")


def test_a_read_in_a_snapshot_older_than_a_rewrite_fails_rather_than_finding_no_rows(
        db: psycopg.Connection, syncer: Syncer) -> None:
    """PostgreSQL's table rewrites are not MVCC-safe: a snapshot taken before `alter table ...
    type bigint` (or TRUNCATE) committed sees the table empty afterwards. Every read of a table's
    rows holds pgcdc._columns_are, which must fail such a read (the run reads again), while a read
    in a snapshot taken after the rewrite goes through."""
    from pgcdc.source.columns import table_columns, unchanged

    db.execute("create table t (id int primary key, n int)")
    db.execute("insert into t select i, i from generate_series(1, 50) i")
    capture.attach(db, "t")
    t = next(a for a in capture.list_attached(db) if a.name == "public.t")
    for rewrite in ("alter table t alter column n type bigint", "truncate t", "vacuum full t"):
        guard = unchanged(t.table_id, table_columns(db, "public.t"))
        with psycopg.connect(syncer.dsn) as old, psycopg.connect(syncer.dsn) as reader:
            old.execute("begin isolation level repeatable read")
            snapshot = old.execute("select pg_export_snapshot()").fetchone()[0]
            db.execute(rewrite)
            reader.execute("begin isolation level repeatable read")
            reader.execute(f"set transaction snapshot '{snapshot}'")
            with pytest.raises(psycopg.errors.UndefinedColumn, match=r"public\.t was rewritten while it was read"):
                reader.execute(f"select count(*) from t where {guard}")
        guard = unchanged(t.table_id, table_columns(db, "public.t"))
        assert db.execute(f"select count(*) from t where {guard}").fetchone()[0] == (0 if "truncate" in rewrite else 50)
        if "truncate" in rewrite:
            db.execute("insert into t select i, i from generate_series(1, 50) i")


@pytest.mark.parametrize("where,engine", [("before-merge", "auto"), ("before-merge", "merge"),
                                          ("before-copy-commit", "merge")])
def test_a_rewrite_overtaking_a_read_in_the_pass_snapshot_leaves_no_row_behind(
        db: psycopg.Connection, syncer: Syncer, monkeypatch: pytest.MonkeyPatch, where: str, engine: str) -> None:
    """A column widened (PostgreSQL rewrites the table) after a pass took its snapshot and before
    a batch (or a copy) of the pass read its rows in it: without the guard the batch's rows read
    as deleted and the copy as empty. The read fails instead; the run applies the batch as the
    rows are now, or the next run copies; Delta ends equal to PostgreSQL. (The copy by Spark:
    one on the driver reads in the connection holding the snapshot, whose lock the ALTER waits
    for. "auto": the fast engine where the Delta version is one it was tested with, as in the
    main suite; the merge engine in the compat lane.)"""
    import pgcdc.faults

    db.execute("create table t (id int primary key, n int, v text)")
    db.execute("insert into t select i, i, 'a' from generate_series(1, 200) i")
    capture.attach(db, "t")
    if where == "before-merge":
        syncer.run(cuts=True, engine=engine)
        db.execute("update t set v = 'b' where id <= 20")
    other = psycopg.connect(syncer.dsn, autocommit=True)

    def act(name: str) -> None:
        if name == where and not other.closed:
            other.execute("set lock_timeout = '30s'")  # (a read holding its lock: the test fails, never hangs)
            other.execute("alter table t alter column n type bigint")
            other.execute("update t set n = 5000000000 where id = 3")
            other.close()
    monkeypatch.setattr(pgcdc.faults, "failpoint", act)
    said = len(syncer.lines)
    if where == "before-copy-commit":  # (the copy fails, in the pass's snapshot and then in one of its own, which
        # reads the columns as they were: the next run copies again)
        with pytest.raises(Exception, match=r"public\.t (was rewritten|changed) while it was read"):
            syncer.run(cuts=True, engine=engine)
    else:  # (the read fails, by the guard or Spark's own schema check: the run widens in place, reads again)
        syncer.run(cuts=True, engine=engine)
        assert any("its columns changed while this run read it" in line or "rewritten while this run read it" in line
                   for line in syncer.lines[said:]), syncer.lines[said:]
    monkeypatch.undo()
    assert other.closed, f"{where} was not passed: {syncer.lines[said:]}"
    syncer.run(cuts=True, engine=engine)
    syncer.assert_equal("public.t")
    assert syncer.delta("public.t").count() == 200
