"""Consumers and retention against real PostgreSQL, Spark and Delta: a stalled consumer does
not make the queue grow without bound, and recovers exact; consumers are listed and dropped."""

from __future__ import annotations

import time
from pathlib import Path

import psycopg
import pytest

from pgcdc.source import capture, consumers
from pgcdc.cli.main import main
from pgcdc.errors import BusyError, TableError, TargetError
from pgcdc.checks.status import status_report
from fixtures.ingest import Syncer


def _queue_rows(conn: psycopg.Connection) -> int:
    return conn.execute("select count(*) from pgcdc.commit_queue").fetchone()[0]


def _write(conn: psycopg.Connection, start: int) -> None:
    """A few transactions of every kind."""
    conn.execute("insert into t select i, 'new' from generate_series(%s::int, %s::int) i", (start, start + 19))
    conn.execute("update t set v = 'changed' where id % 3 = 0")
    conn.execute("delete from t where id % 7 = 0")


def test_stalled_consumer_is_marked_for_resync_and_recovers_exact(db: psycopg.Connection, dsn: str, spark,
                                                                   syncer: Syncer, tmp_path: Path) -> None:
    db.execute("create table t (id int primary key, v text)")
    capture.attach(db, "t")
    db.execute("insert into t select i, 'x' from generate_series(1, 50) i")
    stalled = Syncer(spark, dsn, tmp_path / "lake_stalled")
    syncer.run()
    stalled.run(consumer="stalled")
    consumers.set_retention(db, max_age="1 second")

    _write(db, 100)
    time.sleep(1.2)  # the stalled consumer's oldest unapplied change is now past the limit
    syncer.run()  # its maintain marks the stalled consumer and reclaims what only it needed
    assert db.execute("select resync_reason is not null from pgcdc.consumer_state where consumer = 'stalled'"
                      ).fetchone()[0]
    assert _queue_rows(db) == 0  # the healthy consumer applied everything; nobody pins the queue
    report, healthy = status_report(db)
    assert not healthy and "consumer stalled fell past the queue's retention limit on public.t" in report
    for round_ in range(3):  # the queue stays bounded while the stalled consumer stays away
        _write(db, 200 + 100 * round_)
        syncer.run()
        assert _queue_rows(db) == 0
    syncer.assert_equal("public.t")

    _write(db, 1000)
    reports = stalled.run(consumer="stalled")  # reconciles the table by range, then goes on as usual
    assert reports["public.t"].reconciled is not None and reports["public.t"].copied is None
    assert any("fell past the retention limit" in line for line in stalled.lines)
    stalled.assert_equal("public.t")
    syncer.run()
    syncer.assert_equal("public.t")
    assert db.execute("select count(*) from pgcdc.consumer_state where resync_reason is not null").fetchone()[0] == 0
    assert status_report(db)[1]


@pytest.mark.parametrize("lease", ["whole", "worker"])
def test_running_consumer_is_never_marked(db: psycopg.Connection, dsn: str, lease: str) -> None:
    db.execute("create table t (id int primary key, v text)")
    t = capture.attach(db, "t")
    with psycopg.connect(dsn, autocommit=True) as running:
        (consumers.lock if lease == "whole" else consumers.join)(running, "busy")
        db.execute("insert into pgcdc.consumer_state (consumer, table_id, target, watermark, batch) "
                   "values ('busy', %s, '/x', '1', 1)", (t.table_id,))
        db.execute("insert into t values (1, 'a')")
        consumers.set_retention(db, max_age="0 seconds")
        time.sleep(0.05)
        assert not [a for a, _ in capture.maintain(db) if a == "resync needed"]
    # the closed session's backend may take a moment to go: its lease, or as a worker its lock
    while consumers.is_running(db, "busy") or db.execute("select cardinality(pgcdc._workers('busy'))").fetchone()[0]:
        time.sleep(0.05)
    marked = [p for a, p in capture.maintain(db) if a == "resync needed"]
    assert marked and "public.t of consumer busy" in marked[0]


def test_consumers_list_and_drop(db: psycopg.Connection, dsn: str, syncer: Syncer, tmp_path: Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    db.execute("create table t (id int primary key, v text)")
    capture.attach(db, "t")
    db.execute("insert into t values (1, 'a')")
    syncer.run(consumer="gone")
    db.execute("insert into t values (2, 'b')")
    cfg = tmp_path / "c.toml"
    cfg.write_text(f"[source]\ndsn = \"{dsn}\"\n[target]\nroot = \"{tmp_path}\"\n")
    assert main(["--config", str(cfg), "consumers"]) == 0
    out = capsys.readouterr().out
    assert "gone      1       1               " in out and "retention limit: max age 7 days" in out
    capture.maintain(db)
    assert _queue_rows(db) == 1  # the consumer still needs it
    assert main(["--config", str(cfg), "consumers", "drop", "gone"]) == 2  # needs --yes
    assert main(["--config", str(cfg), "consumers", "drop", "gone", "--yes"]) == 0
    assert "dropped consumer gone (1 table state(s))" in capsys.readouterr().out
    capture.maintain(db)
    assert _queue_rows(db) == 0  # a consumer that is gone pins nothing
    with pytest.raises(TableError, match="no consumer named gone"):
        consumers.drop(db, "gone")
    with pytest.raises(TargetError, match="consumer was dropped"):
        syncer.run(consumer="gone")  # its Delta table is stale: refused, with the way out
    syncer.settings(consumer="gone")
    from pgcdc.sync.ingest import Job
    from pgcdc.sync.runs import resync_tables
    resync_tables(Job(syncer.settings(consumer="gone"), syncer.spark, syncer.lines.append), ["t"])
    syncer.run(consumer="gone")
    syncer.assert_equal("public.t")


def test_drop_refuses_a_running_consumer(db: psycopg.Connection, dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as running:
        consumers.lock(running, "c1")
        with pytest.raises(BusyError, match="consumer c1 is running"):
            consumers.drop(db, "c1")


def test_two_names_with_one_hashtext_do_not_share_a_lock(db: psycopg.Connection, dsn: str) -> None:
    a, b = db.execute("select min(n), max(n) from (select 'c' || i as n, hashtext('c' || i) as h "
                      "from generate_series(1, 300000) i) x group by h having count(*) > 1 limit 1").fetchone()
    with psycopg.connect(dsn, autocommit=True) as first, psycopg.connect(dsn, autocommit=True) as second:
        consumers.lock(first, a)
        consumers.lock(second, b)  # would wait and fail if the locks were keyed by hashtext(name)
        with psycopg.connect(dsn, autocommit=True) as third, pytest.raises(BusyError):
            consumers.LOCK_TRIES, saved = 1, consumers.LOCK_TRIES
            try:
                consumers.lock(third, a)
            finally:
                consumers.LOCK_TRIES = saved


def test_retention_settings_are_checked(db: psycopg.Connection) -> None:
    from pgcdc.errors import ConfigError

    with pytest.raises(ConfigError, match="not a valid interval"):
        consumers.set_retention(db, max_age="soon")
    with pytest.raises(ConfigError, match="not a valid size"):
        consumers.set_retention(db, max_size="big")
    consumers.set_retention(db, max_age="none", max_size="20 GB")
    assert consumers.retention(db) == (None, "20 GB")


def test_size_limit_marks_the_consumer_furthest_behind(db: psycopg.Connection) -> None:
    db.execute("create table t (id int primary key, v text)")
    t = capture.attach(db, "t")
    db.execute("insert into t values (1, 'a')")
    first = int(db.execute("select max(txid)::text from pgcdc.commit_queue").fetchone()[0])
    db.execute("insert into t select i, 'b' from generate_series(2, 5000) i")
    for name, watermark in (("behind", first), ("ahead", first + 1)):
        db.execute("insert into pgcdc.consumer (name) values (%s)", (name,))
        db.execute("insert into pgcdc.consumer_state (consumer, table_id, target, watermark, batch) "
                   "values (%s, %s, '/x', %s::text::xid8, 1)", (name, t.table_id, str(watermark)))
    consumers.set_retention(db, max_age="none", max_size="1 kB")
    marked = [p for a, p in capture.maintain(db) if a == "resync needed"]
    assert len(marked) == 1 and "public.t of consumer behind: the queue" in marked[0] and "1024 bytes" in marked[0]
    assert _queue_rows(db) > 0  # the consumer ahead still needs the newer events
    marked = [p for a, p in capture.maintain(db) if a == "resync needed"]
    assert len(marked) == 1 and "consumer ahead" in marked[0]  # still too big: the next one furthest behind
    assert _queue_rows(db) == 0
