"""`pgcdc ingest --follow`: applies a committed row within seconds, lives through a PostgreSQL
restart under it, shares the consumer with `pgcdc compact`, and stops on SIGTERM with exit 0."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgcdc.source import capture
from pgcdc import errors
from pgcdc.localpg import free_port

pytestmark = pytest.mark.slow


def _config(syncer: Any, tmp_path: Path) -> Path:
    cfg = tmp_path / "pgcdc.toml"
    cfg.write_text(f'consumer = "test"\n[source]\ndsn = "{syncer.dsn}"\n[target]\nroot = "{syncer.root}"\n'
                   '[ingest]\njdbc_partitions = 2\nrecopy_fraction = 0\n')
    return cfg


class Follower:
    """`pgcdc ingest --follow` in its own process group, its JSON log in a file."""

    def __init__(self, cfg: Path, tmp_path: Path, *extra: str) -> None:
        self.log = tmp_path / "follower.log"
        self.err = open(self.log, "w")
        self.proc = subprocess.Popen([sys.executable, "-m", "pgcdc", "--config", str(cfg), "--log-format", "json",
                                      "ingest", "--follow", "--interval", "0.2", *extra],
                                     stdout=subprocess.PIPE, stderr=self.err, text=True, start_new_session=True)

    def records(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.log.read_text().splitlines() if line.startswith("{")]

    def stop(self, sig: int = signal.SIGTERM, group: bool = False) -> int:
        """Signal the follower (`group`: its whole process group, as systemd or a container's stop
        does: its JVM too); its exit code."""
        if group:
            os.killpg(self.proc.pid, sig)
        else:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=120)
        finally:
            self.err.close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.err.close()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _wait_for(syncer: Any, table: str, ids: set[int], follower: Follower, timeout: float = 120) -> float:
    """Seconds until the Delta table (read by the test's own session) holds exactly `ids`."""
    started = time.monotonic()
    while True:
        try:
            got = {r[0] for r in syncer.delta(table).select("id").collect()}
        except Exception:  # (not created yet)
            got = set()
        if got == ids:
            return time.monotonic() - started
        assert follower.proc.poll() is None, f"the follower exited {follower.proc.returncode}: " \
                                             f"{follower.log.read_text()[-3000:]}"
        assert time.monotonic() - started < timeout, f"Delta holds {sorted(got)[-5:]}, not {sorted(ids)[-5:]}; " \
                                                    f"{follower.log.read_text()[-3000:]}"
        time.sleep(0.2)


def test_follower_applies_rows_survives_a_restart_shares_with_compact_and_stops_on_sigterm(
        db: psycopg.Connection, syncer: Any, tmp_path: Path, pg_server: Any) -> None:
    if pg_server.local is None:
        pytest.skip("restarting the server needs the local test server (PGCDC_TEST_DSN is set)")
    db.execute("create table t (id int primary key, v text)")
    db.execute("insert into t select g, 'a' from generate_series(1, 3) g")
    capture.attach(db, "t")
    cfg = _config(syncer, tmp_path)
    port = free_port()
    follower = Follower(cfg, tmp_path, "--metrics-port", str(port))
    try:
        ids = {1, 2, 3}
        _wait_for(syncer, "public.t", ids, follower)  # the first copy
        for i in range(4, 9):
            db.execute("insert into t values (%s, 'b')", (i,))
            ids.add(i)
            print(f"row {i} readable in Delta after {_wait_for(syncer, 'public.t', ids, follower):.2f} s")
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        assert 'pgcdc_events_total{table="public.t"} 5.0' in metrics, metrics
        assert 'pgcdc_pending_events{table="public.t"} 0.0' in metrics

        db.close()
        pg_server.local.stop()  # the server goes away under the follower ...
        time.sleep(3)
        pg_server.local.start()  # ... and comes back
        with psycopg.connect(syncer.dsn, autocommit=True) as conn:
            conn.execute("insert into t values (100, 'after the restart')")
            ids.add(100)
            _wait_for(syncer, "public.t", ids, follower)
            said = [r["message"] for r in follower.records() if r["level"] in ("warning", "error")]
            assert any("run failed" in m and "trying again" in m for m in said), said

            # compact beside the follower while a writer goes on; neither fails
            compact = subprocess.Popen([sys.executable, "-m", "pgcdc", "--config", str(cfg), "compact"],
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for i in range(200, 230):
                conn.execute("insert into t values (%s, 'beside compact')", (i,))
                ids.add(i)
                time.sleep(0.1)
            out, err = compact.communicate(timeout=300)
            assert compact.returncode == 0, err[-3000:]
            assert "OPTIMIZE rewrote" in err and "compacted 1 table(s)" in out, err[-3000:]
            _wait_for(syncer, "public.t", ids, follower)
            syncer.assert_equal("public.t")
        assert follower.stop(group=True) == errors.OK, follower.log.read_text()[-3000:]
        deadline = time.monotonic() + 60  # its JVM ends with it
        while _group_alive(follower.proc.pid):
            assert time.monotonic() < deadline, "the follower's JVM outlived it"
            time.sleep(0.2)
        records = follower.records()
        assert records[-1]["message"].startswith("follower of consumer test stopped (SIGTERM)"), records[-1]
        assert not any(r["level"] == "error" for r in records), [r for r in records if r["level"] == "error"]
    finally:
        follower.kill()


def test_a_second_signal_stops_the_follower_at_once(db: psycopg.Connection, syncer: Any, tmp_path: Path) -> None:
    """The first SIGINT asks for a stop after the batch in flight; a second, at once (exit 130),
    and the next run resumes exactly."""
    db.execute("create table t (id int primary key, v text)")
    db.execute("insert into t select g, 'a' from generate_series(1, 20000) g")
    capture.attach(db, "t")
    follower = Follower(_config(syncer, tmp_path), tmp_path)
    try:
        deadline = time.monotonic() + 120
        while "copying the whole table" not in follower.log.read_text():  # a long step in flight
            assert time.monotonic() < deadline and follower.proc.poll() is None, follower.log.read_text()[-3000:]
            time.sleep(0.05)
        follower.proc.send_signal(signal.SIGINT)
        time.sleep(0.1)
        assert follower.stop(signal.SIGINT) == 130, follower.log.read_text()[-3000:]
        assert "FAILED" not in follower.log.read_text()  # (a stop, whatever error the interrupt became)
    finally:
        follower.kill()
    db.execute("update t set v = 'b' where id <= 10")
    syncer.run()
    syncer.assert_equal("public.t")


def test_a_table_that_keeps_failing_does_not_hold_the_others_back(db: psycopg.Connection, syncer: Any,
                                                                  tmp_path: Path) -> None:
    """public.b's Delta table belongs to another consumer: every run refuses it; the follower
    holds it back with growing pauses and keeps public.a in sync; status names b."""
    from pgcdc.sync.ingest import Job
    from pgcdc.sync.runs import run_job

    for name in ("a", "b"):
        db.execute(f"create table {name} (id int primary key)")
        db.execute(f"insert into {name} values (1)")
        capture.attach(db, name)
    run_job(Job(syncer.settings(consumer="other", tables=["public.b"]), syncer.spark))  # b's place, taken
    cfg = _config(syncer, tmp_path)
    follower = Follower(cfg, tmp_path)
    try:
        _wait_for(syncer, "public.a", {1}, follower)
        for i in range(2, 6):
            db.execute("insert into a values (%s)", (i,))
            db.execute("insert into b values (%s)", (i,))
            _wait_for(syncer, "public.a", set(range(1, i + 1)), follower)
        held = [r for r in follower.records() if "public.b: held back for" in r["message"]]
        assert held and all(r["level"] == "warning" for r in held), follower.log.read_text()[-3000:]
        refused = [r for r in follower.records() if r.get("record") == "table_failed"]
        assert refused and all(r["table"] == "public.b" and "consumer other" in r["error"] for r in refused), refused
        status = subprocess.run([sys.executable, "-m", "pgcdc", "--config", str(cfg), "status", "--json"],
                                capture_output=True, text=True)
        problems = json.loads(status.stdout)["problems"]
        assert status.returncode == errors.ATTENTION and any("public.b" in p for p in problems), problems
        assert follower.stop() == errors.OK
    finally:
        follower.kill()
    assert {r[0] for r in syncer.delta("public.b").collect()} == {1}  # (the other consumer's copy, untouched)


def _backends_gone(db: psycopg.Connection, pids: list[int]) -> bool:
    """Whether these backends have ended (within 10 s: a backend ends shortly after it is told to)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if not db.execute("select count(*) from pg_stat_activity where pid = any(%s)", (pids,)).fetchone()[0]:
            return True
        time.sleep(0.05)
    return False


def test_a_followers_job_keeps_its_connections_between_runs_but_not_the_lease(db: psycopg.Connection,
                                                                             syncer: Any) -> None:
    """A follower's Job reuses its two source connections from run to run, yet the consumer's
    lease ends with each run (another run of the consumer may come in between). Connections
    that died meanwhile are replaced, a run that failed leaves none behind, close() ends them."""
    from pgcdc.source import consumers
    from pgcdc.sync.ingest import Job
    from pgcdc.sync.runs import run_job

    db.execute("create table t (id int primary key, v text)")
    db.execute("insert into t values (1, 'a')")
    capture.attach(db, "t")
    job = Job(syncer.settings(), syncer.spark, following=True)

    def kept() -> list[int]:
        assert job.connections.kept is not None
        return [c.info.backend_pid for c in job.connections.kept]
    run_job(job)
    first = kept()
    assert db.execute("select count(*) from pg_stat_activity where pid = any(%s)", (first,)).fetchone()[0] == 2
    assert not consumers.is_running(db, "test")
    syncer.run()  # another run of the consumer between two of the follower's: the lease is free
    db.execute("update t set v = 'b' where id = 1")
    run_job(job)
    assert kept() == first
    syncer.assert_equal("public.t")

    for pid in first:  # both die between two runs: the next run opens new ones
        db.execute("select pg_terminate_backend(%s)", (pid,))
    assert _backends_gone(db, first)
    db.execute("insert into t values (2, 'c')")
    run_job(job)
    second = kept()
    assert set(second).isdisjoint(first)
    syncer.assert_equal("public.t")

    with psycopg.connect(syncer.dsn, autocommit=True) as other:  # a run that fails (busy) closes them
        consumers.lock(other, "test")
        with pytest.raises(errors.BusyError):
            run_job(job)
        assert job.connections.kept is None and _backends_gone(db, second)
    db.execute("delete from t where id = 1")
    run_job(job)
    third = kept()
    syncer.assert_equal("public.t")
    job.close()
    assert job.connections.kept is None and _backends_gone(db, third)
