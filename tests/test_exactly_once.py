"""Focused regressions for the exactly-once promise: each scenario once broke Delta for good.

The randomized differential test (test_differential.py) looks for such schedules at
random; the ones found are kept here as plain, fast, deterministic tests.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from pgcdc.source import capture


def _writer(dsn: str) -> psycopg.Connection:
    return psycopg.connect(dsn, autocommit=True)


def _tables_a_and_b(db: psycopg.Connection, syncer) -> None:
    """Table a for the long transaction, b for the quick ones; both synced once."""
    db.execute("create table a (id int primary key)")
    db.execute("create table b (id int primary key, v int)")
    capture.attach(db, "a")
    capture.attach(db, "b")
    syncer.run()


@pytest.mark.parametrize("later_mode", ["out_of_order", "strict"])
def test_transactions_applied_out_of_order_do_not_hide_later_ones(db: psycopg.Connection, syncer, dsn: str,
                                                                  later_mode: str) -> None:
    """A long transaction on `a`, three quick ones on `b` applied out of order, then the long
    one commits: later writes to `b` must still arrive (they once stalled for good)."""
    _tables_a_and_b(db, syncer)
    with _writer(dsn) as long_tx, _writer(dsn) as quick:
        long_tx.execute("begin")
        long_tx.execute("insert into a values (1)")
        for i in range(3):
            quick.execute("insert into b values (%s, 0)", (i,))
        report = syncer.run()["public.b"]
        assert (report.events, report.pending_events) == (3, 0)
        long_tx.execute("commit")
    db.execute("insert into b values (10, 0)")
    db.execute("update b set v = 1 where id = 0")
    report = syncer.run(mode=later_mode)["public.b"]
    assert (report.events, report.pending_events) == (2, 0)
    syncer.assert_equal("public.a")
    syncer.assert_equal("public.b")


def test_many_transactions_applied_out_of_order_do_not_cut_the_next_batch_short(db: psycopg.Connection, syncer,
                                                                                dsn: str) -> None:
    """More applied-out-of-order transactions than a batch's event budget ahead of unapplied ones."""
    _tables_a_and_b(db, syncer)
    with _writer(dsn) as long_tx, _writer(dsn) as quick:
        long_tx.execute("begin")
        long_tx.execute("insert into a values (1)")
        for i in range(12):
            quick.execute("insert into b values (%s, 0)", (i,))
        assert syncer.run(max_events_per_batch=5)["public.b"].events == 12
        long_tx.execute("insert into b values (100, 0)")  # the long transaction writes b too
        long_tx.execute("commit")
    for i in range(7):
        db.execute("update b set v = v + 1 where id = %s", (i,))
    report = syncer.run(max_events_per_batch=5)["public.b"]
    assert (report.events, report.pending_events) == (8, 0)
    syncer.assert_equal("public.b")


@pytest.mark.parametrize("mode", ["strict", "out_of_order"])
def test_truncate_committed_before_a_lower_txid_wrote_keeps_that_row(db: psycopg.Connection, syncer, dsn: str,
                                                                     mode: str) -> None:
    """txid order is not commit order: D (lower txid) inserts after A (higher txid) truncated
    and committed. Applying A's TRUNCATE after D's insert must not remove D's row."""
    db.execute("create table t (id int primary key, v text)")
    db.execute("create table other (id int primary key)")
    db.execute("insert into t select i, 'old' from generate_series(1, 5) i")
    capture.attach(db, "t")
    syncer.run(mode=mode)
    with _writer(dsn) as d, _writer(dsn) as c, _writer(dsn) as a:
        d.execute("begin")
        d.execute("insert into other values (1)")  # D takes its txid first
        c.execute("begin")
        c.execute("insert into other values (2)")  # C: open between D and A, holds txmin back
        a.execute("begin")
        a.execute("truncate t")
        a.execute("commit")
        d.execute("insert into t values (42, 'after the truncate')")
        d.execute("commit")
        syncer.run(mode=mode)  # may apply D before A
        c.execute("commit")
    syncer.run(mode=mode)
    syncer.assert_equal("public.t")
    assert [r.id for r in syncer.delta("public.t").collect()] == [42]


def _config(syncer, tmp_path: Path) -> Path:
    cfg = tmp_path / "pgcdc.toml"
    cfg.write_text(f'consumer = "test"\n[source]\ndsn = "{syncer.dsn}"\n[target]\nroot = "{syncer.root}"\n')
    return cfg


@pytest.mark.slow
@pytest.mark.parametrize("kill", ["in the table's creation", "before the copy's commit"])
def test_killed_first_sync_resumes_on_the_next_run(db: psycopg.Connection, syncer, tmp_path: Path,
                                                   kill: str) -> None:
    db.execute("create table t (id int primary key, v text)")
    db.execute("insert into t select i, 'x' from generate_series(1, 50) i")
    capture.attach(db, "t")
    folder = Path(syncer.path("public.t"))
    if kill == "in the table's creation":
        # Delta makes _delta_log/_staged_commits before it writes the first commit: a kill in
        # between leaves the folders (and maybe the commit's temporary file), no commit
        (folder / "_delta_log" / "_staged_commits").mkdir(parents=True)
        (folder / "_delta_log" / ".00000000000000000000.json.0f1e2d3c.tmp").write_text("{")
    else:
        env = os.environ | {"PGCDC_FAILPOINT": "before-copy-commit"}
        proc = subprocess.run([sys.executable, "-m", "pgcdc", "--config", str(_config(syncer, tmp_path)), "ingest"],
                              env=env, capture_output=True, text=True)
        assert proc.returncode == 99, proc.stderr[-2000:]
        assert folder.exists()
    db.execute("update t set v = 'y' where id < 10")
    report = syncer.run()["public.t"]
    assert report.copied == 50
    syncer.assert_equal("public.t")


def test_foreign_files_in_a_new_target_are_still_refused(db: psycopg.Connection, syncer) -> None:
    from pgcdc.errors import TargetError

    db.execute("create table t (id int primary key)")
    capture.attach(db, "t")
    folder = Path(syncer.path("public.t"))
    (folder / "_delta_log" / "_staged_commits").mkdir(parents=True)  # what a killed create leaves: ours
    (folder / "part-0000.parquet").write_bytes(b"somebody's data")
    with pytest.raises(TargetError, match="holds files but is not a Delta table"):
        syncer.run()
    assert (folder / "part-0000.parquet").read_bytes() == b"somebody's data"
