"""A database restored from an earlier backup: same cluster identity, txids back in time.

The backup is a real one: a base backup of the test server (pg_basebackup), stopped at
a point, later started as a primary while Delta already holds changes made after it.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from pgcdc.checks.rewind import reset_watermark
from pgcdc.source import capture
from pgcdc.cli import main as cli
from pgcdc.errors import TargetError
from pgcdc.localpg import LocalPostgres, find_bindir

from fixtures.ingest import Syncer
from fixtures.pg import wait_for_replay


@contextmanager
def _backup(pg_server, db: psycopg.Connection, dsn: str) -> Iterator[LocalPostgres]:
    """A base backup of the test server as of now, stopped (removed at the end)."""
    if pg_server.local is None:
        pytest.skip("needs the local test server (a base backup of it is taken)")
    backup = LocalPostgres(Path(tempfile.mkdtemp(prefix="pgcdc-test-backup-")))
    try:
        backup.start_standby_of(pg_server.local)
        wait_for_replay(db, backup.dsn(conninfo_to_dict(dsn)["dbname"]))
        backup.stop()
        yield backup
    finally:
        backup.stop(remove=True)


def _restored(backup: LocalPostgres, syncer: Syncer, dsn: str, txids: int = 60) -> Syncer:
    """The backup started as the primary (the restore: same system identifier), new traffic
    past Delta's watermarks; a Syncer on it, writing the same Delta tables."""
    (backup.datadir / "standby.signal").unlink()
    backup.start()
    restored = Syncer(syncer.spark, backup.dsn(conninfo_to_dict(dsn)["dbname"]), syncer.root)
    with psycopg.connect(restored.dsn, autocommit=True) as r:
        for _ in range(txids):
            r.execute("select pg_current_xact_id()")
    return restored


def test_restore_to_an_earlier_point_is_refused_until_reset_watermark(
        db: psycopg.Connection, syncer, pg_server, dsn: str, tmp_path: Path, capsys) -> None:
    if pg_server.local is None:
        pytest.skip("needs the local test server (a base backup of it is taken)")
    dbname = conninfo_to_dict(dsn)["dbname"]
    db.execute("create table t (id int primary key, v text)")
    db.execute("insert into t select i, 'a' from generate_series(1, 10) i")
    capture.attach(db, "t")
    syncer.run()
    backup = LocalPostgres(Path(tempfile.mkdtemp(prefix="pgcdc-test-backup-")))
    try:
        backup.start_standby_of(pg_server.local)
        wait_for_replay(db, backup.dsn(dbname))
        backup.stop()  # the backup: the database as of now
        for i in range(20):
            db.execute("insert into t values (%s, 'lost in the restore')", (100 + i,))
        syncer.run()  # Delta now holds rows the backup lacks
        (backup.datadir / "standby.signal").unlink()
        backup.start()  # the restore: a primary at the backup's point, same system identifier
        restored = Syncer(syncer.spark, backup.dsn(dbname), syncer.root)
        with psycopg.connect(restored.dsn, autocommit=True) as r:
            r.execute("update t set v = 'after the restore' where id = 1")
            for _ in range(60):  # new traffic pushes the next txid past Delta's watermark
                r.execute("select pg_current_xact_id()")
            assert int(r.execute("select pg_snapshot_xmax(pg_current_snapshot())::text::bigint").fetchone()[0]) > \
                Syncer.watermark(syncer, "public.t")
        commits = syncer.commits("public.t")

        with pytest.raises(TargetError, match="restored from an earlier backup.*pgcdc reset-watermark"):
            restored.run()
        assert syncer.commits("public.t") == commits  # nothing written

        cfg = tmp_path / "restored.toml"
        cfg.write_text(f'consumer = "test"\n[source]\ndsn = "{restored.dsn}"\n[target]\nroot = "{restored.root}"\n')
        assert cli.main(["--config", str(cfg), "reset-watermark"]) == 0
        said = capsys.readouterr().out
        assert "reset 1 table(s) of consumer test" in said and "(1 by the rows changed since the restore point" in said
        assert "20 rows Delta changed after that were read again, 1 upserted, 20 deleted" in said, said
        restored.assert_equal("public.t")
        assert restored.delta("public.t").where("id >= 100").count() == 0
        with psycopg.connect(restored.dsn, autocommit=True) as r:
            r.execute("delete from t where id = 2")
        assert restored.run()["public.t"].events == 1  # back to normal syncing
        restored.assert_equal("public.t")
    finally:
        backup.stop(remove=True)


@pytest.mark.parametrize("engine,kill", [("fast", "before-rewind-commit"), ("merge", "after-commit")])
def test_reset_watermark_reads_again_only_the_rows_delta_changed_after_the_restore_point(
        db: psycopg.Connection, syncer, pg_server, dsn: str, monkeypatch: pytest.MonkeyPatch, engine: str,
        kill: str) -> None:
    """Lost with the restore: updates, deletes and inserts Delta holds; kept by it: a change made
    before the backup that Delta had not synced yet (in the restored queue above the watermark the
    database recorded); made after it: a change of the new history. Killed once during the reset,
    then reset again: every table equals the restored database, only the changed rows read again."""
    import pgcdc.faults

    for name in ("t", "still"):
        db.execute(f"create table {name} (id int primary key, v text)")
        db.execute(f"insert into {name} select i, 'a' from generate_series(1, 200) i")
        capture.attach(db, name)
    syncer.run(engine=engine)
    db.execute("update t set v = 'before the backup, not synced' where id = 50")
    with _backup(pg_server, db, dsn) as backup:
        db.execute("update t set v = 'lost' where id <= 5")
        db.execute("delete from t where id between 6 and 8")
        db.execute("insert into t select i, 'lost' from generate_series(1000, 1004) i")
        syncer.run(engine=engine)
        restored = _restored(backup, syncer, dsn)
        with psycopg.connect(restored.dsn, autocommit=True) as r:
            r.execute("update t set v = 'after the restore' where id = 9")
        settings = restored.settings(engine=engine)

        def act(name: str) -> None:
            if name == kill:
                raise RuntimeError(f"killed at {name}")
        monkeypatch.setattr(pgcdc.faults, "failpoint", act)
        with pytest.raises(RuntimeError, match=f"killed at {kill}"):
            reset_watermark(settings, syncer.spark, restored.lines.append)
        monkeypatch.undo()
        done = {r.table: r for r in reset_watermark(settings, syncer.spark, restored.lines.append)}
        # (ids 1-8, 1000-1004, and 50, whose change the lost history synced; killed after the commit,
        # before the database recorded it: the second reset winds back from the same point again)
        assert done["public.t"].queued == 14 and done["public.still"].queued == 0, restored.lines
        for name in ("public.t", "public.still"):
            restored.assert_equal(name)
        assert restored.delta("public.t").where("v = 'lost'").count() == 0
        assert restored.delta("public.t").where("id = 50").first().v == "before the backup, not synced"
        with psycopg.connect(restored.dsn, autocommit=True) as r:
            r.execute("delete from t where id = 2")
        assert restored.run(engine=engine)["public.t"].events == 1
        restored.assert_equal("public.t")


def test_dump_restored_into_the_same_cluster_is_refused_until_reset_watermark(
        db: psycopg.Connection, syncer, pg_server, dsn: str, tmp_path: Path, capsys) -> None:
    """pg_dump, later writes Delta syncs, then the dump restored into a new database of the same
    cluster: the restored queue holds events of the old history, txids are handed out again."""
    db.execute("create table t (id int primary key, v text)")
    db.execute("insert into t select i, 'a' from generate_series(1, 10) i")
    capture.attach(db, "t")
    syncer.run()
    dump = tmp_path / "db.dump"
    bindir = find_bindir()
    subprocess.run([str(bindir / "pg_dump"), "-Fc", "-f", str(dump), "-d", dsn], check=True)
    db.execute("insert into t select i, 'lost in the restore' from generate_series(100, 149) i")
    syncer.run()
    name = conninfo_to_dict(dsn)["dbname"] + "_restored"
    with psycopg.connect(pg_server.dsn(), autocommit=True) as admin:
        admin.execute(f'create database "{name}"')
    try:
        subprocess.run([str(bindir / "pg_restore"), "-d", pg_server.dsn(name), str(dump)], check=True)
        restored = Syncer(syncer.spark, pg_server.dsn(name), syncer.root)
        commits = syncer.commits("public.t")
        with pytest.raises(TargetError, match="restored from another database.*pgcdc reset-watermark"):
            restored.run()
        assert syncer.commits("public.t") == commits  # nothing written
        code = cli.main(["--config", str(_config(restored, tmp_path)), "status"])
        assert code == 1 and "restored from another one" in capsys.readouterr().out

        assert cli.main(["--config", str(_config(restored, tmp_path)), "reset-watermark"]) == 0
        said = capsys.readouterr()
        assert "queue: deleted" in said.err and "reset 1 table(s) of consumer test" in said.out  # (log, result)
        restored.assert_equal("public.t")
        assert restored.delta("public.t").count() == 10
        with psycopg.connect(restored.dsn, autocommit=True) as r:  # the new history's txids reach Delta
            for i in range(30):
                r.execute("insert into t values (%s, 'new history')", (1000 + i,))
        assert restored.run()["public.t"].events == 30
        restored.assert_equal("public.t")
    finally:
        with psycopg.connect(pg_server.dsn(), autocommit=True) as admin:
            admin.execute(f'drop database if exists "{name}" with (force)')


def _config(syncer: Syncer, tmp_path: Path) -> Path:
    cfg = tmp_path / "restored.toml"
    cfg.write_text(f'consumer = "test"\n[source]\ndsn = "{syncer.dsn}"\n[target]\nroot = "{syncer.root}"\n')
    return cfg


def test_restore_into_another_cluster_is_detected(db: psycopg.Connection, syncer) -> None:
    db.execute("create table t (id int primary key)")
    capture.attach(db, "t")
    syncer.run()
    state_file = Path(syncer.path("public.t"), "_pgcdc", "test.json")
    state = json.loads(state_file.read_text())
    state["system_id"] = "12345"  # as if the Delta table had been synced from the cluster before a restore
    state_file.write_text(json.dumps(state))
    with pytest.raises(TargetError,
                       match=r"synced from another database .*run `pgcdc reset-watermark` \(or `pgcdc resync public.t`\)"):
        syncer.run()
