"""Reading events and rows from a hot standby: only its xmin is trusted."""

from __future__ import annotations

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict
from pydantic import SecretStr

from pgcdc.source import capture, events
from pgcdc.sync.ingest import Job
from pgcdc.sync.runs import run_job
from pgcdc.watermark import ConsumerState

from fixtures.pg import wait_for_replay


def test_ingest_reads_from_a_hot_standby(db: psycopg.Connection, syncer, pg_standby, dsn: str) -> None:
    standby_dsn = pg_standby.dsn(conninfo_to_dict(dsn)["dbname"])
    db.execute("create table t (id int primary key, v text)")
    db.execute("insert into t select i, 'a' from generate_series(1, 20) i")
    capture.attach(db, "t")
    wait_for_replay(db, standby_dsn)
    settings = syncer.settings()
    settings.source.replica_dsn = SecretStr(standby_dsn)
    run_job(Job(settings, syncer.spark, syncer.lines.append))
    db.execute("update t set v = 'b' where id <= 10")
    db.execute("delete from t where id > 15")
    wait_for_replay(db, standby_dsn)
    reports = {r.table: r for r in run_job(Job(settings, syncer.spark, syncer.lines.append))}
    assert reports["public.t"].events == 2
    syncer.assert_equal("public.t")
    with psycopg.connect(standby_dsn) as s:
        assert s.execute("select pg_is_in_recovery()").fetchone()[0]


def test_watermark_never_moves_back_when_a_standby_reports_a_lower_xmin(db: psycopg.Connection) -> None:
    db.execute("create table t (id int primary key)")
    t = capture.attach(db, "t")
    for i in range(3):
        db.execute("insert into t values (%s)", (i,))
    txids = [int(r[0]) for r in db.execute("select q.txid::text from pgcdc.commit_queue q order by q.txid")]
    state = ConsumerState("c", "public.t", t.table_id, "x", watermark=txids[1] + 1)
    stale = events.Snapshot(txmin=txids[0], xmax=txids[0] + 1, in_progress=(), standby=True)
    strict = events.plan_batch(db, stale, state, out_of_order=False, max_events=100, max_keys=1000)
    assert strict is None  # nothing below the (lower) txmin that is not already applied
    ooo = events.plan_batch(db, stale, state, out_of_order=True, max_events=100, max_keys=1000)
    assert ooo is not None and ooo.lo == state.watermark and ooo.events == 1  # only the txid above the watermark
    assert ooo.next_state(state).watermark >= state.watermark


def test_reading_connections_wait_until_their_standby_replayed_the_planning_position(
        db: psycopg.Connection, pg_standby, dsn: str) -> None:
    """Rows must not be read on a standby that is behind the one a batch was planned on (several
    standbys behind a load balancer): each JDBC connection first runs this wait."""
    from pgcdc.source.enrich import replayed_at_least

    standby_dsn = pg_standby.dsn(conninfo_to_dict(dsn)["dbname"])
    db.execute("create table t (id int primary key)")
    wait_for_replay(db, standby_dsn)
    with psycopg.connect(standby_dsn, autocommit=True) as s:
        s.execute("select pg_wal_replay_pause()")
        try:
            db.execute("insert into t values (1)")
            ahead = db.execute("select pg_current_wal_insert_lsn()::text").fetchone()[0]
            with pytest.raises(psycopg.errors.RaiseException, match=f"replayed only up to .*planned at {ahead}"):
                s.execute(replayed_at_least(ahead, seconds=0.5))
        finally:
            s.execute("select pg_wal_replay_resume()")
        s.execute(replayed_at_least(ahead, seconds=30))  # waits until replay passes it
        assert s.execute("select count(*) from t").fetchone()[0] == 1
    db.execute(replayed_at_least(ahead, seconds=0.5))  # a primary has every change: no wait


def test_keys_queued_on_the_primary_are_on_the_standby_before_the_sync_reads_them(
        db: psycopg.Connection, pg_standby, dsn: str) -> None:
    """repair, reconcile and rewind queue keys on the primary, then wait for the standby their
    sync reads (diff/queue.replayed). With synchronous_commit off the primary reports its WAL
    written before the commit record is: the wait must be for the insert position, or a sync
    finds no queued key and a comparison after it names the row (seen in the randomized test's
    standby schedule)."""
    from pgcdc.diff.queue import replayed

    standby_dsn = pg_standby.dsn(conninfo_to_dict(dsn)["dbname"])
    db.execute("create table t (id int primary key)")
    wait_for_replay(db, standby_dsn)
    db.execute("set synchronous_commit = off")  # (as the test servers run, and many a busy primary)
    with psycopg.connect(standby_dsn, autocommit=True) as s:
        missed = []
        for i in range(20):
            db.execute("insert into t values (%s)", (i,))
            replayed(db, s)
            if not s.execute("select count(*) from t where id = %s", (i,)).fetchone()[0]:
                missed.append(i)
        assert not missed, f"rows not on the standby when replayed() returned: {missed}"


def test_check_tests_the_replica_and_the_target(db: psycopg.Connection, pg_standby, dsn: str, tmp_path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    from pgcdc.cli.main import main

    dbname = conninfo_to_dict(dsn)["dbname"]
    wait_for_replay(db, pg_standby.dsn(dbname))

    def check(replica: str, root: str) -> tuple[int, str]:
        cfg = tmp_path / "c.toml"
        cfg.write_text(f'[source]\ndsn = "{dsn}"\nreplica_dsn = "{replica}"\n[target]\nroot = "{root}"\n')
        code = main(["--config", str(cfg), "check"])
        out = capsys.readouterr()
        return code, out.out + out.err

    code, out = check(pg_standby.dsn(dbname), str(tmp_path / "lake"))
    assert code == 0 and "hot standby" in out and "(writable)" in out and "pgcdc schema v" in out, out
    code, out = check(dsn, str(tmp_path / "lake"))  # the primary itself
    assert code == 2 and "source.replica_dsn is not a hot standby" in out
    code, out = check(pg_standby.dsn("postgres"), str(tmp_path / "lake"))  # a standby, of another database
    assert code == 2 and "is not a standby of source.dsn's database" in out
    (tmp_path / "file").write_text("x")
    code, out = check(pg_standby.dsn(dbname), str(tmp_path / "file" / "lake"))
    assert code == 2 and "target.root" in out and "is not writable" in out
