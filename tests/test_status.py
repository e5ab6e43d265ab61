"""`pgcdc status` never says OK when something needs a person: each case below is made real."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from pgcdc.source import capture
from pgcdc.cli.main import main


def _status(syncer, tmp_path: Path, capsys, replica: str | None = None) -> tuple[int, str]:
    cfg = tmp_path / "status.toml"
    extra = f'replica_dsn = "{replica}"\n' if replica else ""
    cfg.write_text(f'consumer = "test"\n[source]\ndsn = "{syncer.dsn}"\n{extra}[target]\nroot = "{syncer.root}"\n')
    code = main(["--config", str(cfg), "status"])
    return code, capsys.readouterr().out


@pytest.fixture
def synced(db: psycopg.Connection, syncer) -> psycopg.Connection:
    db.execute("create table t (id int primary key, v text)")
    db.execute("insert into t values (1, 'a')")
    capture.attach(db, "t")
    syncer.run()
    return db


def test_healthy_sync_is_ok_with_exit_0(synced, syncer, tmp_path: Path, capsys) -> None:
    code, out = _status(syncer, tmp_path, capsys)
    assert code == 0 and out.startswith("status: OK - 1 table(s) synced")


def test_failed_run_is_attention_naming_the_error(synced, syncer, tmp_path: Path, capsys) -> None:
    synced.execute("alter event trigger pgcdc_ddl disable")  # without the DDL guard, and with
    synced.execute("alter table t drop column v")  # on_schema_change = "fail", a dropped column fails a run
    synced.execute("insert into t values (2)")
    with pytest.raises(Exception, match=r"the columns of public.t changed \(dropped v\)"):
        syncer.run(on_schema_change="fail")
    code, out = _status(syncer, tmp_path, capsys)
    assert code == 1 and "the last ingest of consumer test failed" in out and "pgcdc resync public.t" in out
    syncer.settings()  # a resync and a good run make it healthy again
    from pgcdc.sync.ingest import Job
    from pgcdc.sync.runs import resync_tables

    resync_tables(Job(syncer.settings(), syncer.spark, syncer.lines.append), ["t"])
    syncer.run()
    assert _status(syncer, tmp_path, capsys)[0] == 0


def test_a_delta_table_whose_data_files_are_gone_is_attention_before_any_run(synced, syncer, tmp_path: Path,
                                                                            capsys) -> None:
    """Status reads each local table's own log: a data file deleted behind pgcdc's back (an outside
    VACUUM with its retention check off, a person) is ATTENTION at once, naming the table and the
    fix, not only once the next run fails on it."""
    assert _status(syncer, tmp_path, capsys)[0] == 0
    data = sorted(Path(syncer.path("public.t")).glob("*.parquet"))
    assert data
    data[0].unlink()
    code, out = _status(syncer, tmp_path, capsys)
    assert code == 1 and "the Delta table of public.t (consumer test), references data files that are gone" in out
    assert f"({data[0].name}, ...)" in out and "run `pgcdc resync public.t`" in out, out


@pytest.mark.parametrize("how", ["alter table t disable trigger pgcdc_capture_ins", "drop trigger pgcdc_capture_del on t"])
def test_disabled_or_missing_capture_is_attention(synced, syncer, tmp_path: Path, capsys, how: str) -> None:
    synced.execute(how)
    code, out = _status(syncer, tmp_path, capsys)
    assert code == 1 and "public.t" in out and ("is disabled" in out or "are missing" in out)


def test_table_left_behind_by_a_successful_run_is_attention(synced, syncer, tmp_path: Path, capsys) -> None:
    # what a planning bug once did: the run ended "in sync" while the watermark stayed behind
    synced.execute("update pgcdc.consumer_state set watermark = '3'::xid8")
    code, out = _status(syncer, tmp_path, capsys)
    assert code == 1 and "consumer test is stuck on public.t" in out


def test_unreachable_or_promoted_replica_is_attention(synced, syncer, tmp_path: Path, capsys, pg_server) -> None:
    from pgcdc.localpg import free_port

    code, out = _status(syncer, tmp_path, capsys, replica=pg_server.dsn(port=str(free_port())))
    assert code == 1 and "the replica cannot be reached" in out
    code, out = _status(syncer, tmp_path, capsys, replica=syncer.dsn)  # a primary, not a standby
    assert code == 1 and "is not a hot standby" in out
