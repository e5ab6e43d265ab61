"""Passes over many tables against real PostgreSQL, Spark and Delta: a table with nothing to
apply is passed without reading its Delta table (sync/idle.py), and whatever might make that
wrong (a change, a column added, a long transaction, another run's commit) sends it down the
full path instead."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import psycopg
import pytest

from pgcdc.source import capture, consumers
from pgcdc.source.capture import AttachedTable
from pgcdc.source.sessions import RunSource
from pgcdc.sync.ingest import Job
from pgcdc.sync.runs import run_job
from fixtures.ingest import Syncer

TABLES = [f"public.p{i}" for i in range(5)]


def _setup(db: psycopg.Connection) -> None:
    for name in TABLES:
        db.execute(f"create table {name} (id int primary key, v text)")
        capture.attach(db, name)
        db.execute(f"insert into {name} select i, 'x' from generate_series(1, 20) i")


def _idle_line(lines: list[str]) -> str:
    return next((line for line in reversed(lines) if "table(s) idle" in line), "")


def _hidden(syncer: Syncer, table: str) -> Path:
    """Move the table's Delta log away, leaving its folder empty: any read of that Delta table
    fails while it is gone (only a missing folder is seen without reading, sync/idle.py)."""
    log = Path(syncer.path(table), "_delta_log")
    moved = log.rename(log.with_name("_hidden_log"))
    log.mkdir()
    return moved


def test_an_idle_table_is_passed_without_reading_its_delta_table(db: psycopg.Connection, syncer: Syncer) -> None:
    _setup(db)
    syncer.run()
    db.execute("update public.p0 set v = 'changed' where id <= 3")
    db.execute("insert into public.p4 values (100, 'new')")
    hidden = [(name, _hidden(syncer, name)) for name in TABLES[1:4]]  # idle: nobody may read them
    try:
        reports = syncer.run()
    finally:
        for name, moved in hidden:
            Path(syncer.path(name), "_delta_log").rmdir()
            moved.rename(Path(syncer.path(name), "_delta_log"))
    assert _idle_line(syncer.lines).startswith("3 of 5 table(s) idle"), syncer.lines[-8:]
    assert reports["public.p0"].upserted == 3 and reports["public.p4"].upserted == 1
    assert all(reports[name].batches == 0 and reports[name].pending_events == 0 for name in TABLES[1:4])
    for name in TABLES:
        syncer.assert_equal(name)
    mirrored = dict(db.execute("select a.relid::regclass::text, s.watermark::text::bigint from pgcdc.consumer_state s "
                               "join pgcdc.attached a using (table_id)").fetchall())
    idle = {mirrored[name.removeprefix("public.")] for name in TABLES[1:4]}  # (moved in one statement)
    assert idle == {reports[name].watermark for name in TABLES[1:4]} and len(idle) == 1, (mirrored, reports)


def test_a_column_added_to_an_idle_table_takes_the_full_path_and_lands(db: psycopg.Connection,
                                                                     syncer: Syncer) -> None:
    _setup(db)
    syncer.run()
    db.execute("alter table public.p2 add column n int not null default 7")  # no row event: only DDL
    reports = syncer.run()
    assert _idle_line(syncer.lines).startswith("4 of 5 table(s) idle"), syncer.lines[-8:]
    assert reports["public.p2"].copied is None  # (in place: lake/evolve.py)
    assert any("public.p2: its columns changed in place (added n (existing rows: 7))" in line for line in syncer.lines)
    assert "n" in syncer.delta("public.p2").columns
    syncer.assert_equal("public.p2")


@pytest.mark.parametrize("mode", ["strict", "out_of_order"])
def test_a_long_transaction_on_an_idle_table_lands_once_it_commits(db: psycopg.Connection, dsn: str, spark,
                                                                   tmp_path: Path, mode: str) -> None:
    """One Job run after run (as a follower's), so what it knows of each table comes from memory."""
    _setup(db)
    syncer = Syncer(spark, dsn, tmp_path / "lake")
    job = Job(syncer.settings(mode=mode), spark, syncer.lines.append)
    try:
        run_job(job)
        with psycopg.connect(dsn) as long_tx:
            long_tx.execute("insert into public.p1 values (500, 'long')")  # open: p1 has an event above txmin
            db.execute("insert into public.p3 values (501, 'short')")
            reports = {r.table: r for r in run_job(job)}
            if mode == "strict":  # (p3's transaction began after the long one: above the txmin it holds back)
                assert reports["public.p3"].upserted == 0 and reports["public.p3"].pending_events == 1
            else:
                assert reports["public.p3"].upserted == 1
            assert reports["public.p1"].batches == 0  # (its event is not visible yet)
            long_tx.commit()
        reports = {r.table: r for r in run_job(job)}
        assert reports["public.p1"].upserted == 1
        assert reports["public.p3"].upserted == (1 if mode == "strict" else 0)
        busy = 2 if mode == "strict" else 1
        assert _idle_line(syncer.lines).startswith(f"{5 - busy} of 5 table(s) idle"), syncer.lines[-8:]
        reports = {r.table: r for r in run_job(job)}  # nothing left anywhere
        assert _idle_line(syncer.lines).startswith("5 of 5 table(s) idle"), syncer.lines[-8:]
    finally:
        job.close()
    for name in TABLES:
        syncer.assert_equal(name)


def test_another_runs_commit_sends_a_table_known_idle_down_the_full_path(db: psycopg.Connection, dsn: str, spark,
                                                                        tmp_path: Path) -> None:
    """What a long-lived Job knows of a table goes stale when another run of the consumer commits
    to it: the mirror then holds a later batch, and the table is read in full."""
    _setup(db)
    root = tmp_path / "lake"
    syncer = Syncer(spark, dsn, root)
    job = Job(syncer.settings(), spark, syncer.lines.append)
    try:
        run_job(job)
        db.execute("delete from public.p2 where id = 5")
        Syncer(spark, dsn, root).run()  # another run of the same consumer applies it
        reports = {r.table: r for r in run_job(job)}
        assert _idle_line(syncer.lines).startswith("4 of 5 table(s) idle"), syncer.lines[-8:]
        assert reports["public.p2"].batches == 0
    finally:
        job.close()
    syncer.assert_equal("public.p2")


def test_a_small_tables_copy_is_written_by_the_driver_and_a_resync_replaces_every_file(
        db: psycopg.Connection, syncer: Syncer, monkeypatch: pytest.MonkeyPatch) -> None:
    from delta.tables import DeltaTable

    from pgcdc.sync import plan
    from pgcdc.sync.runs import resync
    from fixtures.ingest import driver_writes

    wrote = driver_writes(monkeypatch)
    _setup(db)
    syncer.run(tables=["public.p0", "public.p1"])
    assert wrote == [1, 1]  # (one file each, written by the driver)
    db.execute("update public.p0 set v = 'changed' where id % 2 = 0")
    db.execute("delete from public.p0 where id > 15")
    syncer.run(tables=["public.p0", "public.p1"])
    wrote.clear()
    resync(syncer.settings(), ["public.p0"], syncer.spark)
    assert wrote == [1]
    history = DeltaTable.forPath(syncer.spark, syncer.path("public.p0")).history(1).collect()[0]
    assert history["operation"] == "WRITE" and history["operationParameters"]["mode"] == "Overwrite"
    live = syncer.spark.read.format("delta").load(syncer.path("public.p0")).inputFiles()
    assert len(live) == 1, live  # every earlier file removed
    assert history["operationMetrics"]["numOutputRows"] == "15"
    syncer.assert_equal("public.p0")
    monkeypatch.setattr(plan, "SMALL_TABLE", 0)  # every table big: Spark copies
    wrote.clear()
    syncer.run(tables=["public.p2"])
    assert wrote == []
    for name in ("public.p0", "public.p1", "public.p2"):
        syncer.assert_equal(name)


def test_parallel_tables_apply_in_lanes_and_a_slow_table_holds_back_only_its_own(
        db: psycopg.Connection, syncer: Syncer, monkeypatch: pytest.MonkeyPatch) -> None:
    """`[ingest] parallel_tables = 3`: the table with the oldest change goes first and blocks in
    its lane until every other table of the pass is applied (by the other lanes: one after
    another, the run would wait for ever); then all of them equal PostgreSQL, each lane having
    joined the consumer as a worker of its own."""
    _setup(db)
    syncer.run()
    for name in ["public.p2", *[n for n in TABLES if n != "public.p2"]]:  # (p2's change is the oldest)
        db.execute(f"update {name} set v = 'changed' where id <= 2")
    others_done, workers = threading.Event(), set()
    synced: list[str] = []
    sync_table = Job.sync_table

    def slow(self: Job, src: RunSource, t: AttachedTable) -> object:
        workers.add(src.primary.info.backend_pid)
        if t.name == "public.p2":
            assert others_done.wait(120), f"the other tables were not applied beside it: {synced}"
        report = sync_table(self, src, t)
        synced.append(t.name)
        if len(synced) == len(TABLES) - 1 and "public.p2" not in synced:
            others_done.set()
        return report
    monkeypatch.setattr(Job, "sync_table", slow)
    reports = syncer.run(parallel_tables=3)
    assert synced[-1] == "public.p2" and len(workers) == 3, (synced, workers)
    from delta.tables import DeltaTable

    for name in TABLES:
        assert reports[name].upserted == 2
        syncer.assert_equal(name)
        # each lane's commit carries its own table's state (its session's confs, not the default's)
        last = DeltaTable.forPath(syncer.spark, syncer.path(name)).history(1).collect()[0]
        assert last["userMetadata"] and json.loads(last["userMetadata"])["table"] == name, (name, last)
    assert consumers.holders(db, "test") == {}  # (every lane gave its leases back)
