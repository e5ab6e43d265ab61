"""Always watching (sync/watch.py): a follower compares a slice of a table's key ranges now and
then. Under a live writer it finds exactly the rows changed behind capture and no other; status
says ATTENTION until they are repaired, and shows how far the round got; with `[watch] repair`
the follower rewrites them by itself. Real PostgreSQL, real Spark + Delta; the follower of the
last test is `pgcdc ingest --follow` in its own process."""

from __future__ import annotations

import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import psycopg

from fixtures.ingest import Syncer
from pgcdc.checks.repair import repair
from pgcdc.checks.status import status_data, status_report
from pgcdc.checks.verify import verify
from pgcdc.localpg import free_port
from pgcdc.source import capture
from pgcdc.sync.ingest import Job
from pgcdc.sync.runs import run_job
from pgcdc.sync.watch import Watcher, watched
from test_follow import Follower, _config
from test_verify_live import _writer

ROWS = 20_000


def _behind(db: psycopg.Connection, sql: str) -> None:
    with db.transaction():
        db.execute("set local session_replication_role = replica")
        db.execute(sql)


def _table(db: psycopg.Connection) -> None:
    db.execute("create table t (id bigint primary key, v int not null, s text)")
    db.execute(f"insert into t select i, 0, md5(i::text) from generate_series(1, {ROWS}) i")
    capture.attach(db, "t")


def test_a_watch_round_under_live_writes_finds_exactly_the_rows_changed_behind_capture(
        db: psycopg.Connection, syncer: Syncer) -> None:
    """Slices of 4 ranges over a 20k-row table while a writer writes and runs apply its changes:
    the two rows changed behind capture are found (and no row on its way), status says ATTENTION
    naming `pgcdc repair` and how far the round got; repair takes the ranges the watch kept (of
    both slices), and status is OK again."""
    _table(db)
    job = Job(syncer.settings(), syncer.spark, syncer.lines.append)
    run_job(job)
    said: list[str] = []
    watcher = Watcher(syncer.settings().model_copy(update={"watch": syncer.settings().watch.model_copy(
        update={"every": 0.001, "ranges": 4})}), syncer.spark, said.append)
    _behind(db, "update t set v = 424242 where id in (3333, 17777)")
    stop = threading.Event()
    writer = threading.Thread(target=_writer, args=(syncer.dsn, stop, 11), daemon=True)
    writer.start()
    path = syncer.path("public.t")
    try:
        for _ in range(12):  # (~20 ranges of ~1000 rows: a round in ~5 slices)
            run_job(job)
            time.sleep(0.01)
            assert watcher.slice(job.known) is not None
            w = watched(syncer.spark, path, "test")
            if w is not None and w.last_ended is not None:
                break
    finally:
        stop.set()
        writer.join()
    found = [line for line in said if "DIFFERENT" in line]
    assert len(found) == 2 and all("run `pgcdc repair public.t`" in line for line in found), said
    assert "3333 (v: PostgreSQL 424242 vs Delta 0)" in found[0] and "17777 (v: PostgreSQL 424242" in found[1], found
    assert w is not None and w.last_began is not None and w.last_ended is not None, w
    report, healthy = status_report(db)
    assert not healthy and "2 rows of public.t differ from its Delta table" in report and \
        "run `pgcdc repair public.t`" in report, report
    assert "watch: test public.t: this round 100% through; every row compared since" in report, report
    [entry] = [s for s in status_data(db)["synced"] if s["table"] == "public.t"]
    assert entry["watch"]["every_row_compared_since"] == w.last_began, entry
    [done] = repair(syncer.settings(), ["public.t"], False, syncer.lines.append, syncer.spark)
    assert done.queued == 2 and 0 < done.before.within < 10 and done.done, done.line()  # (the ranges the watch kept)
    [result] = verify(syncer.spark, db, str(syncer.root), capture.list_attached(db), consumer="test")
    assert result.equal, result.line()
    assert status_report(db)[1], status_report(db)[0]


def test_a_follower_with_watch_repair_rewrites_rows_changed_behind_capture_by_itself(
        db: psycopg.Connection, syncer: Syncer, tmp_path: Path) -> None:
    """`pgcdc ingest --follow` with `[watch] every = 0.2, repair = true`: rows changed behind
    capture are found by a slice, queued and rewritten by the next run, compared again, and
    status is OK; the metrics show the round."""
    _table(db)
    cfg: Any = _config(syncer, tmp_path)
    cfg.write_text(cfg.read_text() + "[watch]\nevery = 0.2\nranges = 8\nrepair = true\n")
    port = free_port()
    follower = Follower(cfg, tmp_path, "--metrics-port", str(port))
    try:
        deadline = time.monotonic() + 180
        while not Path(syncer.path("public.t"), "_pgcdc", "test.watch.json").exists():
            assert time.monotonic() < deadline and follower.proc.poll() is None, follower.log.read_text()[-3000:]
            time.sleep(0.5)
        _behind(db, "update t set v = -7 where id in (10, 19990)")
        _behind(db, "delete from t where id = 5000")
        while True:
            [result] = verify(syncer.spark, db, str(syncer.root), capture.list_attached(db), consumer="test")
            if result.equal:
                break
            assert time.monotonic() < deadline and follower.proc.poll() is None, \
                (result.line(), follower.log.read_text()[-3000:])
            time.sleep(1)
        lines = [r.get("message", "") for r in follower.records()]
        assert any("queued to be rewritten by the next run" in m for m in lines), lines[-20:]
        while not any("public.t: Delta equals PostgreSQL" in m and "compared again after their repair" in m
                      for m in lines):
            assert time.monotonic() < deadline, lines[-20:]
            time.sleep(0.5)
            lines = [r.get("message", "") for r in follower.records()]
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        assert 'pgcdc_watch_round_ratio{table="public.t"}' in metrics, metrics[-2000:]
        report, healthy = status_report(db)
        assert healthy, report
    finally:
        assert follower.stop() == 0
