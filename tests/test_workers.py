"""Workers that share a consumer (sql/functions/worker_lock.sql): each table is applied by one
worker at a time, a worker that dies frees its tables, a run holding the whole consumer (a
restore's reset-watermark) and its workers exclude each other, and a run leaves the tables
another worker holds to it, which `pgcdc status` names. Against real PostgreSQL (and Spark +
Delta for the runs); the randomized differential test's follower schedule plays two workers."""

from __future__ import annotations

import os
import random
import threading
import time

import psycopg
import pytest

from pgcdc.errors import BusyError
from pgcdc.source import capture, consumers
from pgcdc.sync import runs
from pgcdc.sync.compact import compact
from pgcdc.checks.status import status_data
from fixtures.ingest import Syncer


def _gone(db: psycopg.Connection, pid: int) -> None:
    db.execute("select pg_terminate_backend(%s)", (pid,))
    while db.execute("select count(*) from pg_stat_activity where pid = %s", (pid,)).fetchone()[0]:
        time.sleep(0.05)


def test_workers_lease_each_table_to_one_and_a_dead_worker_frees_its_tables(db: psycopg.Connection, dsn: str,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(consumers, "LOCK_TRIES", 1)
    with psycopg.connect(dsn, autocommit=True) as a, psycopg.connect(dsn, autocommit=True) as b:
        with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState, match="not a worker of consumer c"):
            consumers.lease(a, "c", [1])
        consumers.join(a, "c")
        consumers.join(b, "c")
        assert consumers.lease(a, "c", [1, 2]) == {1, 2}
        assert consumers.lease(b, "c", [3, 2, 1, 3]) == {3}
        assert consumers.lease(a, "c", [1, 2]) == {1, 2}  # (its own again)
        held = consumers.holders(db, "c")
        assert held[1] == held[2] == f"{consumers.WORKER} (pid {a.info.backend_pid})"
        assert held[3].endswith(f"(pid {b.info.backend_pid})")
        holder = db.execute("select pgcdc.consumer_holder('c')").fetchone()[0]
        assert holder.startswith("worker(s) ") and f"pid {a.info.backend_pid}" in holder
        with psycopg.connect(dsn, autocommit=True) as whole, pytest.raises(BusyError, match="worker"):
            consumers.lock(whole, "c")  # the whole consumer waits for its workers
        _gone(db, a.info.backend_pid)  # a worker that dies frees its tables
        assert consumers.lease(b, "c", [1, 2, 3]) == {1, 2, 3}
        consumers.unlease(b, "c", [1])
        with psycopg.connect(dsn, autocommit=True) as c:
            consumers.join(c, "c")
            assert consumers.lease(c, "c", [1, 2]) == {1}
            _gone(db, c.info.backend_pid)  # (a closed connection's backend may hold its keys a moment longer)
        consumers.release(b, "c")
        assert consumers.holders(db, "c") == {}
        assert not consumers.is_running(db, "c")
        with psycopg.connect(dsn, autocommit=True) as whole, psycopg.connect(dsn, autocommit=True) as d:
            consumers.lock(whole, "c")
            with pytest.raises(BusyError, match="another pgcdc run holds consumer c whole"):
                consumers.join(d, "c")


def test_workers_leasing_the_same_tables_at_once_never_share_one(db: psycopg.Connection, dsn: str) -> None:
    """Two workers lease overlapping sets in random orders, over and over: each table goes to
    one of them (never both, never neither), and no lease waits on the other (no deadlock)."""
    seed = int(os.environ.get("PGCDC_SEED", random.randrange(1_000_000)))
    print(f"seed {seed} (re-play: PGCDC_SEED={seed})")
    rng = random.Random(seed)
    ids = list(range(1, 41))
    with psycopg.connect(dsn, autocommit=True) as a, psycopg.connect(dsn, autocommit=True) as b:
        for conn in (a, b):
            consumers.join(conn, "c")
        for _ in range(30):
            orders = [rng.sample(ids, len(ids)) for _ in range(2)]
            got: list[set[int]] = [set(), set()]

            def take(i: int, conn: psycopg.Connection) -> None:
                got[i] = consumers.lease(conn, "c", orders[i])
            threads = [threading.Thread(target=take, args=(i, conn)) for i, conn in enumerate((a, b))]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=30)
            assert not got[0] & got[1] and got[0] | got[1] == set(ids), (seed, got)
            for i, conn in enumerate((a, b)):
                consumers.unlease(conn, "c", sorted(got[i]))


def test_a_run_leaves_a_table_another_worker_holds_and_status_names_it(db: psycopg.Connection, syncer: Syncer,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    names = [f"public.w{i}" for i in range(3)]
    ids = {}
    for name in names:
        db.execute(f"create table {name} (id int primary key, v text)")
        ids[name] = capture.attach(db, name).table_id
        db.execute(f"insert into {name} select i, 'x' from generate_series(1, 10) i")
    syncer.run()
    recorded = db.execute("select start_txmin::text from pgcdc.consumer_run").fetchone()[0]
    assert recorded is not None
    for name in names:
        db.execute(f"update {name} set v = 'y' where id <= 4")
    with psycopg.connect(syncer.dsn, autocommit=True) as other:  # another worker, applying w1
        consumers.join(other, "test")
        assert consumers.lease(other, "test", [ids["public.w1"]]) == {ids["public.w1"]}
        reports = syncer.run()
        assert set(reports) == {"public.w0", "public.w2"} and reports["public.w0"].upserted == 4
        assert any("left to the consumer's other workers" in line and "public.w1" in line for line in syncer.lines)
        # (this run did not take every table past its start: it records no txmin all of them reached)
        assert db.execute("select start_txmin::text from pgcdc.consumer_run").fetchone()[0] == recorded
        synced = {s["table"]: s for s in status_data(db)["synced"]}
        assert synced["public.w1"]["worker"] == f"{consumers.WORKER} (pid {other.info.backend_pid})"
        assert synced["public.w1"]["state"] == "behind" and synced["public.w0"]["worker"] is None
        monkeypatch.setattr(runs, "LEASE_WAIT", 0.5)
        with pytest.raises(BusyError, match=f"public.w1: worker .*pid {other.info.backend_pid}.* is applying it"):
            runs.resync(syncer.settings(), ["public.w1"], syncer.spark)
        with pytest.raises(BusyError, match="public.w1: worker"):
            compact(syncer.settings(), syncer.spark, ["public.w1"], wait=0.5)
    reports = syncer.run()  # (the other worker ended: its table is free)
    assert reports["public.w1"].upserted == 4
    for name in names:
        syncer.assert_equal(name)
    assert db.execute("select start_txmin::text from pgcdc.consumer_run").fetchone()[0] != recorded
