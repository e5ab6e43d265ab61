"""A database restored from an earlier backup: same cluster identity, txids back in time.

The backup is a real one: a base backup of the test server (pg_basebackup), stopped at
a point, later started as a primary while Delta already holds changes made after it.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from pgcdc import capture, cli
from pgcdc.errors import TargetError
from pgcdc.localpg import LocalPostgres

from fixtures.ingest import Syncer
from fixtures.pg import wait_for_replay


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
        commits = syncer.commits("public.t")

        with pytest.raises(TargetError, match="restored from an earlier backup.*pgcdc reset-watermark"):
            restored.run()
        assert syncer.commits("public.t") == commits  # nothing written

        cfg = tmp_path / "restored.toml"
        cfg.write_text(f'consumer = "test"\n[source]\ndsn = "{restored.dsn}"\n[target]\nroot = "{restored.root}"\n')
        assert cli.main(["--config", str(cfg), "reset-watermark"]) == 0
        assert "reset 1 table(s) of consumer test" in capsys.readouterr().out
        restored.assert_equal("public.t")
        assert restored.delta("public.t").where("id >= 100").count() == 0
        with psycopg.connect(restored.dsn, autocommit=True) as r:
            r.execute("delete from t where id = 2")
        assert restored.run()["public.t"].events == 1  # back to normal syncing
        restored.assert_equal("public.t")
    finally:
        backup.stop(remove=True)
