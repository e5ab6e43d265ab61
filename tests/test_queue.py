"""Queue maintenance against a real PostgreSQL: consumed history is reclaimed, no committed
event is ever lost to it, and it never makes an application statement wait long."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from pgcdc.source import capture


def _txids(conn: psycopg.Connection) -> list[int]:
    return [r[0] for r in conn.execute("select txid::text::bigint from pgcdc.commit_queue order by 1")]


def _consumer_at(conn: psycopg.Connection, table_id: int, watermark: int) -> None:
    conn.execute("insert into pgcdc.consumer_state (consumer, table_id, target, watermark, batch) "
                 "values ('c', %s, '/x', %s::text::xid8, 1) on conflict (consumer, table_id) "
                 "do update set watermark = excluded.watermark", (table_id, str(watermark)))


def _waiting_on_lock(conn: psycopg.Connection, pid: int, timeout: float = 10) -> None:
    """Wait until backend `pid` waits for a lock."""
    deadline = time.monotonic() + timeout
    while conn.execute("select wait_event_type from pg_stat_activity where pid = %s", (pid,)).fetchone()[0] != "Lock":
        assert time.monotonic() < deadline, f"backend {pid} never waited for a lock"
        time.sleep(0.02)


def _small_slots(db: psycopg.Connection, watermark: int, transactions: int) -> int:
    """Slots of 100 txids, a table with a consumer at `watermark`, and that many one-row
    transactions; the table's id."""
    capture.install(db, slot_txids=100)
    db.execute("create table t (id int primary key)")
    t = capture.attach(db, "t")
    _consumer_at(db, t.table_id, watermark)
    for i in range(transactions):
        db.execute("insert into t values (%s)", (i,))
    return t.table_id


def test_maintain_reclaims_consumed_slots_and_keeps_everything_unapplied(conn: psycopg.Connection) -> None:
    db = conn
    table_id = _small_slots(db, 1, 450)  # 450 transactions: the slots are used round and round
    assert [a for a, _ in capture.maintain(db)] == []  # nothing consumed yet: nothing emptied
    txids = _txids(db)
    watermark = txids[300]  # the consumer has applied the first 300 transactions
    _consumer_at(db, table_id, watermark)
    emptied = [p for a, p in capture.maintain(db) if a == "emptied"]
    left = _txids(db)
    assert [x for x in left if x >= watermark] == txids[300:]  # nothing the consumer still needs is gone
    assert emptied and len(left) < 450  # consumed slots went
    _consumer_at(db, table_id, txids[-1] + 1)
    capture.maintain(db)
    assert _txids(db) == []  # all consumed: every slot emptied
    assert db.execute("select count(*) from t").fetchone()[0] == 450


def test_maintain_keeps_events_above_a_restored_watermark(conn: psycopg.Connection) -> None:
    """After a restore the mirrored watermarks come from the old cluster, far above the new txids."""
    db = conn
    _small_slots(db, 999999999, 150)
    capture.maintain(db)
    assert db.execute("select count(*) from pgcdc.commit_queue").fetchone()[0] == 150


def test_maintain_never_empties_a_slot_under_a_writer_that_commits_while_it_waits(db: psycopg.Connection,
                                                                                  dsn: str) -> None:
    """The issue's reproduction: maintain sees only consumed events in a slot, waits for the
    slot's lock held by a writer whose event is not committed yet; the writer commits."""
    db.execute("create table t (id int primary key)")
    t = capture.attach(db, "t")
    for i in range(3):
        db.execute("insert into t values (%s)", (i,))  # consumed history in the same slot
    with psycopg.connect(dsn) as writer, psycopg.connect(dsn, autocommit=True) as maint:
        writer.execute("insert into t values (100)")
        # the consumer has applied everything below the writer's transaction
        _consumer_at(db, t.table_id, int(writer.execute("select pg_current_xact_id()::text").fetchone()[0]))
        pid = maint.info.backend_pid
        got: list[tuple[str, str]] = []
        worker = threading.Thread(target=lambda: got.extend(
            maint.execute("select * from pgcdc.maintain('10s')").fetchall()))
        worker.start()
        _waiting_on_lock(db, pid)
        writer.commit()
        worker.join(20)
    assert ("kept", "pgcdc.commit_queue_s0") in got, got
    assert (["100"],) in db.execute("select keys from pgcdc.commit_queue").fetchall()  # the commit's event


def test_maintain_never_stalls_the_application(db: psycopg.Connection, dsn: str) -> None:
    """An application transaction holds a slot open; maintain wants that slot; another
    application statement arrives while maintain waits. It must not wait for the open
    transaction: at most maintain's lock_wait (statement_timeout bounds the test far above it)."""
    db.execute("create table t (id int primary key)")
    capture.attach(db, "t")
    db.execute("insert into t values (0)")
    with psycopg.connect(dsn) as open_tx, psycopg.connect(dsn, autocommit=True) as maint, \
            psycopg.connect(dsn, autocommit=True) as app:
        open_tx.execute("insert into t values (1)")  # holds the slot's lock until it ends
        got: list[tuple[str, str]] = []
        worker = threading.Thread(target=lambda: got.extend(
            maint.execute("select * from pgcdc.maintain('500ms')").fetchall()))
        worker.start()
        _waiting_on_lock(db, maint.info.backend_pid)
        app.execute("set statement_timeout = '10s'")  # the open transaction lasts until after this
        started = time.monotonic()
        app.execute("insert into t values (2)")  # queued behind maintain's lock request, not behind open_tx
        waited = time.monotonic() - started
        worker.join(20)
        print(f"application INSERT waited {waited * 1000:.0f} ms behind maintain (lock_wait 500 ms)")
        assert ("busy", "pgcdc.commit_queue_s0") in got, got
        open_tx.commit()
    assert sorted(db.execute("select keys[1] from pgcdc.commit_queue").fetchall()) == [("0",), ("1",), ("2",)]
    assert [a for a, _ in capture.maintain(db)] == ["emptied"]  # no consumer: everything ended is reclaimed


def test_maintain_in_repeatable_read_is_refused(db: psycopg.Connection, dsn: str) -> None:
    with psycopg.connect(dsn) as other, pytest.raises(psycopg.errors.InvalidTransactionState, match="READ COMMITTED"):
        other.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        other.execute("select * from pgcdc.maintain()")


def test_concurrent_maintain_returns_at_once(db: psycopg.Connection, dsn: str) -> None:
    with psycopg.connect(dsn) as other:  # (a transaction inside maintain holds this lock)
        other.execute("lock table pgcdc.meta in share update exclusive mode")
        assert capture.maintain(db) == [("busy", "another pgcdc.maintain() is running")]


def test_advisory_locks_anyone_takes_do_not_stop_maintain(db: psycopg.Connection, dsn: str) -> None:
    """Advisory keys are database-wide: the key schema v4 used (hashtext('pgcdc.maintain')), held
    by anyone, no longer matters."""
    db.execute("do $$ begin create role squatter login password 'squat'; exception when duplicate_object then null; end $$")
    with psycopg.connect(dsn, user="squatter", password="squat", autocommit=True) as other:
        other.execute("select pg_advisory_lock(hashtext('pgcdc.maintain'))")
        assert ("busy", "another pgcdc.maintain() is running") not in capture.maintain(db)


def test_upgrade_moves_a_v2_queue_into_slots(conn: psycopg.Connection) -> None:
    """Schema v2 partitioned the queue by txid range with a default partition."""
    db = conn
    db.execute("create schema pgcdc")
    db.execute("create table pgcdc.meta (key text primary key, value text not null)")
    db.execute("insert into pgcdc.meta values ('schema_version', '2'), ('partition_size', '16777216')")
    db.execute("create table pgcdc.commit_queue (txid xid8 not null, table_id int not null, op \"char\" not null, "
               "shard int, at timestamptz not null default now(), keys text[], payload jsonb) partition by range (txid)")
    db.execute("create table pgcdc.commit_queue_default partition of pgcdc.commit_queue default")
    db.execute("create table pgcdc.commit_queue_0 partition of pgcdc.commit_queue for values from ('0') to ('16777216')")
    db.execute("create index commit_queue_txid on pgcdc.commit_queue (txid)")
    db.execute("insert into pgcdc.commit_queue (txid, table_id, op, keys) values "
               "('5', 1, 'I', '{a}'), ('300000', 1, 'U', '{b}'), ('20000000', 1, 'D', '{c}')")
    db.execute("create table pgcdc.consumer_state (consumer text, table_id int, target text, watermark xid8, "
               "out_of_order text not null default '', batch bigint, updated_at timestamptz not null default now(), "
               "primary key (consumer, table_id))")
    db.execute("insert into pgcdc.consumer_state values ('old', 1, '/x', '1', '', 1)")
    assert capture.install(db) == (2, capture.SCHEMA_VERSION)
    rows = db.execute("select q.txid::text, q.slot, q.keys from pgcdc.commit_queue q order by q.txid").fetchall()
    assert rows == [("5", 0, ["a"]), ("300000", 1, ["b"]), ("20000000", (20000000 // 262144) % 4, ["c"])]
    assert capture.queue_size(db)[0] == 4
    assert db.execute("select name from pgcdc.consumer").fetchall() == [("old",)]
