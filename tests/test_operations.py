"""What a scheduler and a log shipper read: exit codes, --version, --json, JSON logs, Spark's quiet."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

from pgcdc.source import capture, consumers
from pgcdc import errors
from pgcdc.cli.main import main


def _config(syncer, tmp_path: Path, consumer: str = "test") -> Path:
    cfg = tmp_path / "pgcdc.toml"
    cfg.write_text(f'consumer = "{consumer}"\n[source]\ndsn = "{syncer.dsn}"\n[target]\nroot = "{syncer.root}"\n'
                   '[ingest]\njdbc_partitions = 2\nrecopy_fraction = 0\nmax_events_per_batch = 2\n')
    return cfg


def _pgcdc(cfg: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pgcdc", "--config", str(cfg), *args], capture_output=True, text=True,
                          env=os.environ | (env or {}), timeout=600)


def test_version_names_pgcdc_and_its_spark_pair(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("pgcdc 0.") and f"pyspark {version('pyspark')}" in out, out


def test_exit_codes_are_distinct_and_documented() -> None:
    codes = {"OK": errors.OK, "ATTENTION": errors.ATTENTION, "USAGE": errors.USAGE, "BUSY": errors.BUSY,
             "FAILURE": errors.FAILURE, "INTERRUPTED": errors.INTERRUPTED}
    assert len(set(codes.values())) == 6
    table = Path(__file__).parents[1].joinpath("docs", "operations.md").read_text()
    for name, code in codes.items():
        assert re.search(rf"^\| {code} \| {name.lower()}", table, re.M), f"docs/operations.md lacks exit code {code}"
    assert errors.BusyError("x").exit_code == errors.BUSY
    assert errors.ConflictError("x").exit_code == errors.FAILURE
    assert errors.SourceError("x", transient=True).exit_code == errors.FAILURE
    assert errors.SourceError("x").exit_code == errors.USAGE  # (a refused login: a person must fix it)
    assert errors.ConfigError("x").exit_code == errors.USAGE
    assert errors.StoppedError("x").exit_code == errors.INTERRUPTED


def test_server_down_is_a_failure_and_a_refused_login_a_usage_error(tmp_path: Path, pg_server) -> None:
    from pgcdc.localpg import free_port

    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[source]\ndsn = "host=127.0.0.1 port={free_port()} user=postgres password=Secret-1"\n'
                   f'[target]\nroot = "{tmp_path}"\n')
    down = _pgcdc(cfg, "status")
    assert down.returncode == errors.FAILURE and "Connection refused" in down.stderr, down.stderr
    cfg.write_text(f'[source]\ndsn = "{pg_server.dsn(password="Wrong-Secret-1")}"\n[target]\nroot = "{tmp_path}"\n')
    refused = _pgcdc(cfg, "status")
    assert refused.returncode == errors.USAGE and "password authentication failed" in refused.stderr
    assert "Wrong-Secret-1" not in refused.stderr + refused.stdout


@pytest.mark.slow
def test_a_second_run_exits_busy_before_spark_starts(db: psycopg.Connection, syncer, tmp_path: Path) -> None:
    db.execute("create table t (id int primary key)")
    capture.attach(db, "t")
    cfg = _config(syncer, tmp_path)
    with psycopg.connect(syncer.dsn, autocommit=True) as running:
        consumers.lock(running, "test")  # as a running ingest holds it
        started = time.monotonic()
        for command in (["ingest"], ["ingest", "--follow"]):
            proc = _pgcdc(cfg, *command)
            assert proc.returncode == errors.BUSY, proc.stderr[-2000:]
            assert "another pgcdc run holds consumer test whole" in proc.stderr
            assert "ivy" not in proc.stderr.lower() and "spark" not in proc.stderr.lower(), proc.stderr[-2000:]
        print(f"two refused runs took {time.monotonic() - started:.1f} s")  # (the lock is tried for 5 s each)


@pytest.mark.slow
def test_json_log_has_one_record_per_batch_and_no_spark_info(db: psycopg.Connection, syncer, tmp_path: Path) -> None:
    """`--log-format json`: every stderr line of pgcdc's parses, one `batch` record per Delta
    commit with its counts, one `run` record; Spark says nothing at INFO; no secret anywhere."""
    from delta.tables import DeltaTable

    db.execute("create table t (id int primary key, v text)")
    db.execute("insert into t select g, 'a' from generate_series(1, 5) g")
    capture.attach(db, "t")
    cfg = _config(syncer, tmp_path)
    assert _pgcdc(cfg, "ingest").returncode == 0
    for i in range(5):  # five transactions; two events a batch: three batches
        db.execute("update t set v = %s where id = %s", (f"b{i}", i + 1))
    db.execute("delete from t where id = 5")
    proc = _pgcdc(cfg, "--log-format", "json", "ingest")
    assert proc.returncode == 0, proc.stderr[-3000:]
    password = re.search(r"password=(\S+)", syncer.dsn)
    assert password and password.group(1) not in proc.stderr + proc.stdout
    assert not re.search(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d INFO ", proc.stderr, re.M), proc.stderr[-3000:]
    records = [json.loads(line) for line in proc.stderr.splitlines() if line.startswith("{")]
    assert all(r["logger"].startswith("pgcdc.") and r["level"] in ("info", "warning") for r in records)
    batches = [r for r in records if r.get("record") == "batch"]
    history = DeltaTable.forPath(syncer.spark, syncer.path("public.t")).history().collect()
    new_commits = [h for h in history if h["operation"] == "MERGE"]  # (the first run copied: WRITE)
    assert len(batches) == len(new_commits) == 3, (batches, [h["operation"] for h in history])
    assert [b["batch"] for b in batches] == sorted(b["batch"] for b in batches)
    assert sum(b["events"] for b in batches) == 6 and sum(b["deleted"] for b in batches) == 1
    assert sum(b["upserted"] for b in batches) == 4 and all(b["engine"] in ("fast", "merge") for b in batches)
    assert all(b["table"] == "public.t" and b["seconds"] >= 0 and b["keys"] >= 1 for b in batches)
    assert batches[-1]["watermark"] == syncer.watermark("public.t")
    runs = [r for r in records if r.get("record") == "run"]
    assert len(runs) == 1 and runs[0]["events"] == 6 and runs[0]["failed"] == [], runs


@pytest.mark.slow
@pytest.mark.slow
def test_a_one_shot_ingest_stops_between_batches_on_sigterm(db: psycopg.Connection, syncer, tmp_path: Path) -> None:
    """What cron, systemd and Airflow send on a timeout: a one-shot `pgcdc ingest` finishes the
    batch in flight, records its run and exits INTERRUPTED, saying so; the next run goes on and
    Delta ends equal to PostgreSQL."""
    import signal

    db.execute("create table t (id int primary key, v text)")
    capture.attach(db, "t")
    cfg = _config(syncer, tmp_path)  # (two events a batch)
    syncer.run()
    for i in range(60):  # sixty transactions: thirty batches
        db.execute("insert into t values (%s, 'x')", (i,))
    proc = subprocess.Popen([sys.executable, "-m", "pgcdc", "--config", str(cfg), "--log-format", "json", "ingest"],
                            stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if '"record": "batch"' in line:
            proc.send_signal(signal.SIGTERM)
            break
    said = "".join(seen) + proc.stderr.read()  # (until it exits)
    proc.wait(timeout=300)
    assert proc.returncode == errors.INTERRUPTED, said[-3000:]
    assert "stopped on SIGTERM after the batch in flight" in said, said[-3000:]
    batches = [json.loads(line) for line in said.splitlines() if '"record": "batch"' in line]
    assert 1 <= len(batches) < 30, len(batches)  # it stopped part-way
    run = db.execute("select finished_at is not null, ok from pgcdc.consumer_run where consumer = 'test'").fetchone()
    assert run == (True, True), run  # (recorded; the txmin it reached stays the one before)
    syncer.run()  # the next run goes on (in-process)
    syncer.assert_equal("public.t")


def test_json_outputs_parse_and_list_every_table(db: psycopg.Connection, syncer, tmp_path: Path) -> None:
    for name in ("a", "b"):
        db.execute(f"create table {name} (id int primary key)")
        db.execute(f"insert into {name} values (1), (2)")
        capture.attach(db, name)
    syncer.run()
    cfg = _config(syncer, tmp_path)
    status = _pgcdc(cfg, "status", "--json")
    assert status.returncode == errors.OK, status.stdout + status.stderr
    data = json.loads(status.stdout)
    assert data["healthy"] is True and data["verdict"] == "OK" and data["problems"] == []
    assert sorted(s["table"] for s in data["synced"]) == ["public.a", "public.b"]
    assert all(s["consumer"] == "test" and s["delta_table"] == syncer.path(s["table"]) for s in data["synced"])
    listed = json.loads(_pgcdc(cfg, "list", "--json").stdout)
    assert [(t["table"], t["key"]) for t in listed] == [("public.a", ["id"]), ("public.b", ["id"])]
    found = json.loads(_pgcdc(cfg, "consumers", "--json").stdout)
    assert [(c["name"], c["tables"], c["running"]) for c in found["consumers"]] == [("test", 2, False)]
    db.execute("insert into a values (3)")
    db.execute("drop table b")  # status must not say OK now
    status = _pgcdc(cfg, "status", "--json")
    data = json.loads(status.stdout)
    assert status.returncode == errors.ATTENTION and not data["healthy"] and data["verdict"] == "ATTENTION"
    assert any("public.b was dropped" in p for p in data["problems"]), data["problems"]
    verify = _pgcdc(cfg, "verify", "--json", "public.a")  # (the row not synced yet: on its way)
    compared = json.loads(verify.stdout)
    assert verify.returncode == errors.OK and compared[0]["equal"] is True and compared[0]["in_flight"] == 1
    db.execute("set session_replication_role = replica")  # (a row capture does not see: a real difference)
    db.execute("insert into a values (4)")
    db.execute("reset session_replication_role")
    verify = _pgcdc(cfg, "verify", "--json", "public.a")
    compared = json.loads(verify.stdout)
    assert verify.returncode == errors.ATTENTION and compared[0]["equal"] is False
    assert compared[0]["only_in_postgres"] == 1 and compared[0]["table"] == "public.a"


def test_the_airflow_dag_in_the_docs_compiles_and_uses_the_exit_codes() -> None:
    docs = Path(__file__).parents[1] / "docs"
    source = (docs / "airflow_dag.py").read_text()
    compile(source, "airflow_dag.py", "exec")
    assert f"BUSY = {errors.BUSY}" in source and "skip_on_exit_code=BUSY" in source
    assert source in (docs / "operations.md").read_text()  # (the runbook shows the file as it is)
