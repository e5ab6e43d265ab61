"""A table reconciled by range instead of copied (sync/reconcile.py): after a re-attach, for a
consumer past the retention limit, and for a Delta table taken over with `pgcdc adopt`. Only
the rows that differ are rewritten, the Delta table's other files stay, and it ends equal to
PostgreSQL under live writes and after a kill before the reconcile's commit. Real PostgreSQL,
real Spark + Delta; PostgreSQL read with psycopg and Delta with a plain Spark read (the oracle
does not reuse the sync's reading)."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import psycopg
import pytest

from fixtures.ingest import Syncer
from pgcdc.checks.adopt import adopt
from pgcdc.checks.status import status_report
from pgcdc.errors import TargetError
from pgcdc.source import capture, consumers

ROWS = 5000


def _pg(db: psycopg.Connection) -> list[tuple]:
    return sorted(db.execute("select id, v, n from t").fetchall())


def _delta(syncer: Syncer) -> list[tuple]:
    return sorted(tuple(r) for r in syncer.delta("public.t").select("id", "v", "n").collect())


def _files(syncer: Syncer) -> set[str]:
    return {f.split("/")[-1] for f in syncer.delta("public.t").inputFiles()}


def _table(db: psycopg.Connection) -> None:
    db.execute("create table t (id int primary key, v text, n int)")
    db.execute(f"insert into t select i, md5(i::text), i from generate_series(1, {ROWS}) i")


def _behind_capture(db: psycopg.Connection) -> None:
    """20 keys changed where capture does not see them: 10 updated, 5 deleted, 5 inserted."""
    db.execute("update t set v = 'unseen' where id between 101 and 110")
    db.execute("delete from t where id between 201 and 205")
    db.execute(f"insert into t select i, 'unseen new', 0 from generate_series({ROWS + 1}, {ROWS + 5}) i")


def _writer(dsn: str, stop: threading.Event, seed: int) -> None:
    """Small transactions of updates, inserts and deletes until stopped."""
    rng = random.Random(seed)
    with psycopg.connect(dsn, autocommit=True) as conn:
        while not stop.is_set():
            lo = rng.randrange(1, ROWS + 500)
            conn.execute(rng.choice(["update t set n = n + 1 where id between %s and %s + 4",
                                     "insert into t select i, 'w', 0 from generate_series(%s::int, %s + 4) i "
                                     "on conflict (id) do update set n = -1",
                                     "delete from t where id between %s and %s + 2"]), (lo, lo))
            time.sleep(0.01)


@pytest.mark.parametrize("kill", [False, True], ids=["whole", "killed-before-commit"])
def test_a_table_attached_again_is_reconciled_by_range_under_live_writes(db: psycopg.Connection, syncer: Syncer,
                                                                        monkeypatch, kill: bool) -> None:
    """Detached, changed where capture did not see it, attached again: the run compares by range
    and rewrites the 20 keys that differ (not the table) while a writer goes on, and ends equal;
    killed before the reconcile's commit, the next run does it again and ends equal too."""
    import pgcdc.faults

    _table(db)
    capture.attach(db, "t")
    syncer.run()
    before = _files(syncer)
    capture.detach(db, "t")
    _behind_capture(db)
    capture.attach(db, "t")
    if kill:
        def crash(name: str) -> None:
            if name == "before-reconcile-commit":
                raise RuntimeError("killed at before-reconcile-commit")
        monkeypatch.setattr(pgcdc.faults, "failpoint", crash)
        with pytest.raises(RuntimeError, match="killed"):
            syncer.run()
        monkeypatch.undo()
    stop = threading.Event()
    writer = threading.Thread(target=_writer, args=(syncer.dsn, stop, 5), daemon=True)
    writer.start()
    try:
        report = syncer.run()["public.t"]
    finally:
        stop.set()
        writer.join()
    assert report.copied is None and report.reconciled is not None
    assert 20 <= report.reconciled < 200, report.reconciled  # (the writer's changes may differ too)
    assert any("reconciling its Delta table by range" in line for line in syncer.lines)
    syncer.run()
    assert _delta(syncer) == _pg(db)
    kept = before & _files(syncer)
    assert len(kept) >= len(before) - 4, (len(before), len(kept))  # (no copy rewrote the table's files)
    db.execute("update t set v = 'after' where id = 1")
    assert syncer.run()["public.t"].events == 1
    assert _delta(syncer) == _pg(db)


def test_attached_again_with_another_key_is_copied_saying_why(db: psycopg.Connection, syncer: Syncer) -> None:
    """A Delta table keyed otherwise cannot be reconciled by the new key: copied, the reason said."""
    _table(db)
    db.execute("alter table t alter v set not null, add unique (v)")
    capture.attach(db, "t")
    syncer.run()
    capture.attach(db, "t", key=["v"])
    report = syncer.run()["public.t"]
    assert report.copied is not None and report.reconciled is None
    assert any("keyed by id, the table now by v" in line for line in syncer.lines), syncer.lines[-5:]
    assert _delta(syncer) == _pg(db)


def test_a_consumer_past_the_retention_limit_is_reconciled_by_range(db: psycopg.Connection, dsn: str, spark,
                                                                    syncer: Syncer, tmp_path: Path) -> None:
    """A stalled consumer's events are reclaimed past the retention limit: its next run compares
    by range instead of copying, rewrites the keys changed meanwhile, and status is OK again."""
    _table(db)
    capture.attach(db, "t")
    stalled = Syncer(spark, dsn, tmp_path / "lake_stalled")
    syncer.run()
    stalled.run(consumer="stalled")
    before = _files(stalled)
    consumers.set_retention(db, max_age="1 second")
    db.execute("update t set v = 'missed' where id % 500 = 0")  # 10 keys
    db.execute("delete from t where id between 3001 and 3003")
    time.sleep(1.2)
    syncer.run()  # its maintenance marks the stalled consumer and reclaims its events
    assert db.execute("select count(*) from pgcdc.commit_queue").fetchone()[0] == 0
    assert not status_report(db)[1]
    # (the limit lifted again: the keys the reconcile queues are changes for the other consumer too, which a
    # one-second limit would mark in turn while the reconcile runs)
    consumers.set_retention(db, max_age="none")
    report = stalled.run(consumer="stalled")["public.t"]
    assert report.copied is None and report.reconciled == 13, (report, stalled.lines[-5:])
    assert _delta(stalled) == _pg(db)
    assert len(before & _files(stalled)) >= len(before) - 2
    assert db.execute("select count(*) from pgcdc.consumer_state where resync_reason is not null").fetchone()[0] == 0
    syncer.run()
    assert status_report(db)[1]


def test_adopt_takes_over_a_delta_table_written_elsewhere_rewriting_only_what_differs(
        db: psycopg.Connection, syncer: Syncer) -> None:
    """A Delta table another tool wrote (a few rows stale, one missing, one extra) at the table's
    place: ingest refuses it; `pgcdc adopt` takes it over and rewrites only those rows; later
    changes follow. Adopting what is not there, or another consumer's, is refused."""
    _table(db)
    capture.attach(db, "t")
    path = syncer.path("public.t")
    rows = [(i, f"old{i}" if i <= 3 else v, n) for i, v, n in _pg(db) if i != 10] + [(ROWS + 100, "extra", 0)]
    syncer.spark.createDataFrame(rows, "id int, v string, n int").repartitionByRange(20, "id").write.format(
        "delta").save(path)
    before = _files(syncer)
    with pytest.raises(TargetError, match="was not created by pgcdc.*`pgcdc adopt public.t`"):
        syncer.run()
    [report] = adopt(syncer.settings(), ["public.t"], syncer.spark, syncer.lines.append)
    assert report.copied is None and report.reconciled == 5, syncer.lines[-5:]
    assert any("took over" in line for line in syncer.lines)
    assert _delta(syncer) == _pg(db)
    assert len(before & _files(syncer)) >= len(before) - 2, (len(before), len(before & _files(syncer)))
    db.execute("update t set n = -5 where id = 42")
    assert syncer.run()["public.t"].events == 1
    assert _delta(syncer) == _pg(db)
    with pytest.raises(TargetError, match="belongs to consumer test"):
        adopt(syncer.settings(consumer="other"), ["public.t"], syncer.spark)
    db.execute("create table u (id int primary key)")
    capture.attach(db, "u")
    with pytest.raises(TargetError, match="there is no Delta table at .* to take over for public.u"):
        adopt(syncer.settings(), ["public.u"], syncer.spark)
