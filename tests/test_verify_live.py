"""`pgcdc verify` while the application writes (diff/in_flight.py): no difference on a correct
sync, whatever the writers do meanwhile; a row changed behind pgcdc's back (capture bypassed,
or the Delta table written by another tool) named, with what to do. Real PostgreSQL, real
Spark + Delta; the writer runs at ~1000 rows/s on a thread of its own."""

from __future__ import annotations

import random
import threading
import time

import psycopg

from fixtures.ingest import Syncer
from pgcdc.checks.repair import repair
from pgcdc.checks.verify import verify
from pgcdc.source import capture
from pgcdc.sync.runs import resync

ROWS = 20_000


def _writer(dsn: str, stop: threading.Event, seed: int) -> None:
    """~1000 rows/s: updates, inserts and deletes of 20 rows a statement, in short transactions,
    now and then one left open for a while."""
    rng = random.Random(seed)
    with psycopg.connect(dsn, autocommit=True) as conn:
        while not stop.is_set():
            lo = rng.randrange(1, ROWS + 2000)
            what = rng.random()
            with conn.transaction():
                if what < 0.6:
                    conn.execute("update t set v = v + 1, s = md5(random()::text) where id between %s and %s",
                                 (lo, lo + 19))
                elif what < 0.85:
                    conn.execute("insert into t select i, 0, 'new' from generate_series(%s::bigint, %s) i "
                                 "on conflict (id) do update set v = -t.v", (lo, lo + 19))
                else:
                    conn.execute("delete from t where id between %s and %s", (lo, lo + 19))
                if rng.random() < 0.02:
                    time.sleep(0.3)  # (a transaction open across verify's snapshot)
            time.sleep(0.02)


def test_verify_under_live_writes_finds_no_difference_on_a_correct_sync_and_names_a_bypass(
        db: psycopg.Connection, syncer: Syncer) -> None:
    db.execute("create table t (id bigint primary key, v int not null, s text)")
    db.execute(f"insert into t select i, 0, md5(i::text) from generate_series(1, {ROWS}) i")
    db.execute("insert into t select i, 0, 'beyond the writer' from generate_series(50001, 50010) i")
    capture.attach(db, "t")
    syncer.run()
    stop = threading.Event()
    writer = threading.Thread(target=_writer, args=(syncer.dsn, stop, 7), daemon=True)
    writer.start()
    try:
        moving = 0
        for _ in range(3):
            syncer.run()
            time.sleep(0.5)  # (more changes, not synced)
            [result] = verify(syncer.spark, db, str(syncer.root), capture.list_attached(db), consumer="test")
            assert result.equal, result.line()
            moving += result.in_flight
        assert moving > 0  # (the writer's changes were seen on their way, and not counted as differences)
        with db.transaction():  # capture bypassed: as a logical replication apply worker writes
            db.execute("set local session_replication_role = replica")
            db.execute("update t set v = 424242 where id = 50005")
            db.execute("insert into t values (99999, 1, 'unseen')")
        syncer.run()
        [result] = verify(syncer.spark, db, str(syncer.root), capture.list_attached(db), consumer="test")
        assert not result.equal, result.line()
        assert (result.only_in_postgres, result.only_in_delta) == (2, 1), result.line()
        assert "50005 (v: PostgreSQL 424242 vs Delta 0)" in result.line() and "99999 (only in PostgreSQL)" in \
            result.line(), result.line()
        assert "changed where capture did not see them" in result.next_step, result.next_step

        # repair, the writer still writing: the three differing rows and a row another tool deleted from Delta
        with db.transaction():
            db.execute("set local session_replication_role = replica")
            db.execute("delete from t where id = 50007")
        syncer.spark.sql(f"delete from delta.`{syncer.path('public.t')}` where id = 50008")
        [dry] = repair(syncer.settings(), ["public.t"], True, syncer.lines.append, syncer.spark)
        assert dry.after is None and dry.queued == 4 and "without --dry-run rewrites them" in dry.line(), dry.line()
        [done] = repair(syncer.settings(), ["public.t"], False, syncer.lines.append, syncer.spark)
        assert done.queued == 4 and done.done and done.after is not None and done.after.equal, done.line()
    finally:
        stop.set()
        writer.join()
    syncer.run()
    syncer.assert_equal("public.t")


def test_repair_turns_every_kind_of_key_back_into_its_row(db: psycopg.Connection, syncer: Syncer) -> None:
    """A composite key of a date, a timestamp with and without a time zone, text, a numeric and a
    uuid: verify's canonical key texts, turned back into keys by PostgreSQL, find the rows."""
    db.execute("create table k (d date, ts timestamptz, tl timestamp, s text, n numeric(8,2), u uuid, v int, "
               "primary key (d, ts, tl, s, n, u))")
    db.execute("insert into k select date '2024-02-28' + i, timestamptz '2024-01-01 10:00:00.123456+02' + i * "
               "interval '1 hour', timestamp '1999-12-31 23:59:59' + i * interval '1 second', 'a''b' || i, "
               "i / 4.0, md5(i::text)::uuid, 0 from generate_series(1, 200) i")
    capture.attach(db, "k")
    syncer.run()
    with db.transaction():
        db.execute("set local session_replication_role = replica")
        db.execute("update k set v = 7 where v = 0 and n < 2")  # 7 rows changed
        db.execute("delete from k where n between 10 and 10.5")  # 3 rows gone
    [done] = repair(syncer.settings(), ["public.k"], False, syncer.lines.append, syncer.spark)
    assert done.queued == 10 and done.done, done.line()
    syncer.assert_equal("public.k")


def test_a_repair_killed_after_queueing_is_finished_by_the_next_run(db: psycopg.Connection, syncer: Syncer,
                                                                    monkeypatch) -> None:
    """Killed after the keys were queued, before (or after) the batch applying them committed:
    the keys stay in the queue, and the next ingest applies them; a second repair finds nothing."""
    import pgcdc.faults

    db.execute("create table r (id int primary key, v text)")
    db.execute("insert into r select i, 'a' from generate_series(1, 500) i")
    capture.attach(db, "r")
    syncer.run()
    with db.transaction():
        db.execute("set local session_replication_role = replica")
        db.execute("update r set v = 'behind' where id % 50 = 0")  # 10 rows
        db.execute("delete from r where id between 101 and 104")  # 4 rows
    for kill in ("before-commit", "after-commit"):
        def act(name: str, kill: str = kill) -> None:
            if name == kill:
                raise RuntimeError(f"killed at {name}")
        monkeypatch.setattr(pgcdc.faults, "failpoint", act)
        try:
            repair(syncer.settings(), ["public.r"], False, syncer.lines.append, syncer.spark)
        except RuntimeError as exc:
            assert f"killed at {kill}" in str(exc)
        else:
            raise AssertionError(f"repair was not killed at {kill}")
        monkeypatch.undo()
        syncer.run()
        syncer.assert_equal("public.r")
        [again] = repair(syncer.settings(), ["public.r"], False, syncer.lines.append, syncer.spark)
        assert again.before.equal and again.queued == 0, again.line()
        with db.transaction():  # (the next round: rows behind pgcdc's back again)
            db.execute("set local session_replication_role = replica")
            db.execute("update r set v = 'behind again' where id % 70 = 0")


def test_a_rewrite_overtaking_verifys_snapshot_is_compared_again_not_named_as_every_row_gone(
        db: psycopg.Connection, syncer: Syncer, monkeypatch) -> None:
    """A column widened (PostgreSQL rewrites the table) after verify took its snapshot and before
    it read the rows: that snapshot sees the table empty (rewrites are not MVCC-safe). Verify
    compares again and finds Delta equal; in a transaction of the caller's, which it cannot take
    again, it says it could not compare."""
    import pgcdc.diff.rows as verifying

    db.execute("create table w (id int primary key, n int)")
    db.execute("insert into w select i, i from generate_series(1, 300) i")
    capture.attach(db, "w")
    syncer.run()
    [t] = [a for a in capture.list_attached(db) if a.name == "public.w"]
    original = verifying.canon.pg_columns
    other = psycopg.connect(syncer.dsn, autocommit=True)

    def columns_then_rewrite(conn: psycopg.Connection, name: str):  # (the snapshot is taken by now)
        found = original(conn, name)
        if not other.closed:
            other.execute("set lock_timeout = '30s'")
            other.execute("alter table w alter column n type bigint")
            other.close()
        return found
    monkeypatch.setattr(verifying.canon, "pg_columns", columns_then_rewrite)
    with psycopg.connect(syncer.dsn, autocommit=True) as conn:
        [found] = verify(syncer.spark, conn, str(syncer.root), [t], consumer="test")
    assert other.closed and found.equal, found.line()
    other = psycopg.connect(syncer.dsn, autocommit=True)
    monkeypatch.setattr(verifying.canon, "pg_columns", lambda conn, name: (
        original(conn, name), other.closed or other.execute("alter table w alter column n type int"), other.close())[0])
    with psycopg.connect(syncer.dsn) as conn:  # (a transaction of the caller's, its snapshot taken)
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        conn.execute("select 1")
        [found] = verify(syncer.spark, conn, str(syncer.root), [t], consumer="test")
    assert found.problem is not None and "public.w (w) was rewritten" in found.problem, found.line()


def test_repair_soon_after_verify_compares_only_the_key_ranges_verify_found(db: psycopg.Connection,
                                                                          syncer: Syncer, monkeypatch) -> None:
    """Verify keeps the key ranges that differed beside the Delta table; a repair within the hour
    compares only those (read again: a row the application changed meanwhile is read as it is),
    rewrites their rows, compares them again and forgets them. A repair with nothing kept, or with
    `whole`, or after the hour, compares the whole table; and a row changed behind pgcdc's back
    outside the kept ranges is left for the next whole comparison, as documented."""
    import pgcdc.checks.repair as repairing
    from pgcdc.lake import verified

    db.execute("create table g (id bigint primary key, v int not null)")
    db.execute("insert into g select i, 0 from generate_series(1, 20000) i")
    capture.attach(db, "g")
    syncer.run()

    def behind(sql: str) -> None:
        with db.transaction():
            db.execute("set local session_replication_role = replica")
            db.execute(sql)
    path, tables = syncer.path("public.g"), [t for t in capture.list_attached(db) if t.name == "public.g"]
    behind("update g set v = 1 where id in (105, 110)")
    [found] = verify(syncer.spark, db, str(syncer.root), tables, consumer="test")
    assert found.only_in_postgres == 2 and found.ranges is not None and len(found.ranges.chosen) == 1, found
    kept = verified.last(syncer.spark, path, "test")
    assert kept is not None and not kept.equal and kept.differing == 2
    behind("update g set v = 2 where id = 107")  # the same range, after verify: found too
    behind("update g set v = 3 where id = 15000")  # elsewhere: not compared by this repair
    [done] = repair(syncer.settings(), ["public.g"], False, syncer.lines.append, syncer.spark)
    assert done.queued == 3 and done.before.within == 1 and done.after is not None and done.after.within == 1, \
        done.line()
    assert "in the 1 key ranges compared" in done.line(), done.line()
    assert verified.last(syncer.spark, path, "test") is None  # (forgotten: the next repair compares the whole table)
    [whole] = repair(syncer.settings(), ["public.g"], False, syncer.lines.append, syncer.spark)
    assert whole.queued == 1 and whole.before.within == 0 and whole.after is not None and whole.after.equal, \
        whole.line()
    behind("update g set v = 4 where id = 9000")
    [found] = verify(syncer.spark, db, str(syncer.root), tables, consumer="test")
    behind("update g set v = 5 where id = 19000")
    monkeypatch.setattr(repairing, "RECENT", 0.0)  # (the verify is too old to say where to look)
    [late] = repair(syncer.settings(), ["public.g"], False, syncer.lines.append, syncer.spark)
    assert late.queued == 2 and late.before.within == 0, late.line()
    monkeypatch.undo()
    behind("update g set v = 6 where id = 2000")
    [found] = verify(syncer.spark, db, str(syncer.root), tables, consumer="test")
    behind("update g set v = 7 where id = 12000")
    [forced] = repair(syncer.settings(), ["public.g"], False, syncer.lines.append, syncer.spark, whole=True)
    assert forced.queued == 2 and forced.before.within == 0, forced.line()
    [final] = verify(syncer.spark, db, str(syncer.root), tables, consumer="test")
    assert final.equal, final.line()


def test_columns_added_after_the_last_run_are_on_their_way_and_columns_added_to_delta_alone_differ(
        db: psycopg.Connection, syncer: Syncer) -> None:
    """A column added in PostgreSQL after the consumer's last commit: verify cannot compare the
    rows yet and says the next run brings Delta to them (not DIFFERENT: a watch under live DDL
    would name every such table); after that run, equal. A column added to the Delta table by
    another tool, its state's columns still PostgreSQL's: DIFFERENT, with what to do."""
    db.execute("create table k (id int primary key, v int)")
    db.execute("insert into k select i, i from generate_series(1, 500) i")
    capture.attach(db, "k")
    syncer.run()
    tables = [t for t in capture.list_attached(db) if t.name == "public.k"]
    db.execute("alter table k add column extra text default 'x'")
    [moving] = verify(syncer.spark, db, str(syncer.root), tables, consumer="test")
    assert not moving.equal and moving.columns is None and moving.problem is not None, moving.line()
    assert "NOT COMPARED: its columns changed in PostgreSQL after the consumer's last commit (columns differ: " \
           "PostgreSQL id, v, extra; Delta id, v)" in moving.line(), moving.line()
    assert "DIFFERENT" not in moving.line() and "compare again after `pgcdc ingest`" in moving.line(), moving.line()
    syncer.run()
    [after] = verify(syncer.spark, db, str(syncer.root), tables, consumer="test")
    assert after.equal and after.delta_rows == 500, after.line()

    syncer.spark.sql(f"alter table delta.`{syncer.path('public.k')}` add columns (elsewhere int)")
    [differ] = verify(syncer.spark, db, str(syncer.root), tables, consumer="test")
    assert differ.columns == "columns differ: PostgreSQL id, v, extra; Delta id, v, extra, elsewhere", differ.line()
    assert "DIFFERENT" in differ.line() and differ.problem is None, differ.line()
    assert "another tool changed the Delta table's columns after the consumer's last commit: run `pgcdc resync " \
           "public.k`" in differ.line(), differ.line()
    syncer.run()  # (the table is idle: a run passes it by)
    [still] = verify(syncer.spark, db, str(syncer.root), tables, consumer="test")
    assert still.columns == differ.columns, still.line()
    resync(syncer.settings(), ["public.k"], syncer.spark)
    [fixed] = verify(syncer.spark, db, str(syncer.root), tables, consumer="test")
    assert fixed.equal and fixed.delta_rows == 500, fixed.line()
