"""Crashes, other writers, bad targets, concurrency: the promise holds or the job refuses clearly."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from pgcdc.source import capture, consumers
from pgcdc.errors import BusyError, TargetError

from fixtures.ingest import run_with_writer_before_commit


def _config(syncer, tmp_path: Path, consumer: str = "test") -> Path:
    cfg = tmp_path / "pgcdc.toml"
    cfg.write_text(f'consumer = "{consumer}"\n[source]\ndsn = "{syncer.dsn}"\n[target]\nroot = "{syncer.root}"\n'
                   '[ingest]\njdbc_partitions = 2\nsmall_batch_keys = 1\nrecopy_fraction = 0\n')
    return cfg


def run_crashing_at(syncer, monkeypatch, point: str) -> None:
    """Run ingest in-process and abandon it at a failpoint, as a crash there would."""
    import pgcdc.faults

    def crash(name: str) -> None:
        if name == point:
            raise KeyboardInterrupt(f"simulated crash at {point}")
    monkeypatch.setattr(pgcdc.faults, "failpoint", crash)
    with pytest.raises(KeyboardInterrupt):
        syncer.run()
    monkeypatch.undo()


@pytest.mark.slow
def test_killed_after_merge_then_rerun_applies_each_change_once(db: psycopg.Connection, syncer, tmp_path: Path) -> None:
    db.execute("create table t (id int primary key, n int)")
    db.execute("insert into t values (1, 0)")
    capture.attach(db, "t")
    syncer.run()
    db.execute("update t set n = n + 1")
    db.execute("insert into t values (2, 0)")
    cfg = _config(syncer, tmp_path)
    env = os.environ | {"PGCDC_FAILPOINT": "after-merge"}
    proc = subprocess.run([sys.executable, "-m", "pgcdc", "--config", str(cfg), "ingest"], env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 99, proc.stderr[-2000:]  # died right after the Delta commit
    status = subprocess.run([sys.executable, "-m", "pgcdc", "--config", str(cfg), "status"],
                            capture_output=True, text=True)
    assert status.returncode == 1 and "the last ingest of consumer test" in status.stdout
    assert "did not finish: it was killed" in status.stdout
    assert syncer.delta("public.t").count() == 2  # the MERGE was committed ...
    with psycopg.connect(syncer.dsn) as c:  # ... but neither the state file nor the mirror were written
        assert c.execute("select batch from pgcdc.consumer_state").fetchone()[0] == 1
    commits = syncer.commits("public.t")

    db.execute("update t set n = n + 1 where id = 2")
    # the re-run goes through spark-submit, the entry point users schedule
    venv_bin = str(Path(sys.executable).parent)
    env = os.environ | {"PATH": venv_bin + os.pathsep + os.environ["PATH"], "PYSPARK_PYTHON": sys.executable}
    from pgcdc.cli.submit import submit_args

    proc = subprocess.run([shutil.which("spark-submit", path=venv_bin), *submit_args(job="jobs/ingest.py"),
                           "--config", str(cfg)],
                          capture_output=True, text=True, env=env,
                          cwd=Path(__file__).resolve().parents[1])
    assert proc.returncode == 0, proc.stderr[-3000:]
    # (under spark-submit the Python driver's stderr, its log, reaches spark-submit's stdout)
    assert "public.t: 1 events in 1 batches, 1 upserted, 0 deleted" in proc.stdout + proc.stderr
    assert syncer.commits("public.t") == commits + 1  # only the new change was merged
    syncer.assert_equal("public.t")
    with psycopg.connect(syncer.dsn) as c:
        assert c.execute("select batch from pgcdc.consumer_state").fetchone()[0] == 3


def test_crash_before_merge_redoes_the_batch(db: psycopg.Connection, syncer, monkeypatch) -> None:
    db.execute("create table t (id int primary key)")
    capture.attach(db, "t")
    syncer.run()
    db.execute("insert into t values (1), (2)")
    run_crashing_at(syncer, monkeypatch, "before-merge")
    assert syncer.delta("public.t").count() == 0
    assert syncer.run()["public.t"].events == 1
    syncer.assert_equal("public.t")


def test_state_survives_other_writers_checkpoints_vacuum_and_log_cleanup(db: psycopg.Connection, syncer) -> None:
    db.execute("create table t (id int primary key, v text)")
    db.execute("insert into t select i, 'x' from generate_series(1, 20) i")
    capture.attach(db, "t")
    syncer.run()
    db.execute("update t set v = 'y' where id < 5")
    syncer.run()
    path = syncer.path("public.t")
    spark = syncer.spark
    spark.sql(f"optimize delta.`{path}`")  # another writer: compaction commit without our txn
    spark.sql(f"alter table delta.`{path}` set tblproperties ('owner.note' = 'x')")
    spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    spark.sql(f"vacuum delta.`{path}` retain 0 hours")
    jvm = spark._jvm
    jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, path).checkpoint()
    for f in Path(path, "_delta_log").glob("*.json"):  # log cleanup: every commit JSON before the checkpoint
        if int(f.stem) < int(sorted(Path(path, "_delta_log").glob("*.checkpoint.parquet"))[-1].name[:20]):
            f.unlink()
    db.execute("delete from t where id = 1")
    report = syncer.run()["public.t"]
    assert (report.events, report.deleted) == (1, 1)
    syncer.assert_equal("public.t")


def test_state_file_lost_is_rebuilt_from_the_commit(db: psycopg.Connection, syncer) -> None:
    db.execute("create table t (id int primary key)")
    capture.attach(db, "t")
    syncer.run()
    db.execute("insert into t values (1)")
    syncer.run()
    state_file = Path(syncer.path("public.t"), "_pgcdc", "test.json")
    state_file.unlink()
    db.execute("insert into t values (2)")
    assert syncer.run()["public.t"].events == 1
    assert state_file.exists()
    syncer.assert_equal("public.t")


@pytest.mark.parametrize("route", ["local folder", "Hadoop file system"])
def test_state_file_is_replaced_whole_and_a_damaged_one_reads_as_missing(spark, tmp_path: Path, monkeypatch,
                                                                         route: str) -> None:
    from pgcdc.lake import side_files
    from pgcdc.watermark import ConsumerState, TxidSet
    from pgcdc.lake.state import read_state_file, write_state_file

    if route == "Hadoop file system":  # the way to object stores, here over file://
        monkeypatch.setattr(side_files, "_local", lambda path, name: None)
    path = f"file://{tmp_path}/t"
    first = ConsumerState("c", "public.t", 7, "42", 100).next(120, TxidSet.of([(125, 126)]))
    assert read_state_file(spark, path, "c") is None
    write_state_file(spark, path, first)
    assert read_state_file(spark, path, "c") == first
    second = first.next(130, TxidSet())
    write_state_file(spark, path, second)
    assert read_state_file(spark, path, "c") == second and read_state_file(spark, path, "other") is None
    assert sorted(p.name for p in (tmp_path / "t" / "_pgcdc").iterdir() if not p.name.endswith(".crc")) == ["c.json"]
    (tmp_path / "t" / "_pgcdc" / "c.json").write_text(second.to_json()[:40])  # as a crash mid-write would leave it
    assert read_state_file(spark, path, "c") is None


def test_target_of_another_consumer_or_not_pgcdc_is_refused(db: psycopg.Connection, syncer) -> None:
    db.execute("create table t (id int primary key)")
    capture.attach(db, "t")
    syncer.run(consumer="a")
    with pytest.raises(TargetError, match="belongs to consumer a .*not to consumer b"):
        syncer.run(consumer="b")
    db.execute("create table u (id int primary key)")
    capture.attach(db, "u")
    syncer.spark.range(3).write.format("delta").save(syncer.path("public.u"))
    before = syncer.commits("public.u")
    with pytest.raises(TargetError, match="was not created by pgcdc"):
        syncer.run(consumer="a", tables=["u"])
    assert syncer.commits("public.u") == before


def test_second_concurrent_run_is_refused(db: psycopg.Connection, syncer, dsn: str) -> None:
    db.execute("create table t (id int primary key)")
    capture.attach(db, "t")
    with psycopg.connect(dsn, autocommit=True) as other:  # stands in for a running job of the consumer
        consumers.lock(other, "test")
        with pytest.raises(BusyError, match="another pgcdc run holds consumer test whole"):
            syncer.run()
    syncer.run()


def test_unattached_configured_table_is_refused(db: psycopg.Connection, syncer) -> None:
    from pgcdc.errors import TableError

    db.execute("create table t (id int primary key)")
    with pytest.raises(TableError, match=r"table public.t is listed in `tables` but not attached; run `pgcdc attach"):
        syncer.run(tables=["t"])


def test_cli_verify_and_status(db: psycopg.Connection, syncer, tmp_path: Path, capsys) -> None:
    from pgcdc.cli.main import main

    db.execute("create table t (id int primary key, v text)")
    db.execute("insert into t values (1, 'a')")
    capture.attach(db, "t")
    syncer.run()
    cfg = _config(syncer, tmp_path)
    assert main(["--config", str(cfg), "verify"]) == 0
    assert "public.t: Delta equals PostgreSQL (1 rows)" in capsys.readouterr().out
    db.execute("insert into t values (2, 'b')")  # (not synced yet: on its way, no difference)
    assert main(["--config", str(cfg), "verify"]) == 0
    assert "public.t: Delta equals PostgreSQL (1 rows; 1 rows differ by changes not synced yet)" in \
        capsys.readouterr().out
    db.execute("set session_replication_role = replica")  # (a write capture does not see)
    db.execute("insert into t values (3, 'c')")
    db.execute("reset session_replication_role")
    assert main(["--config", str(cfg), "verify"]) == 1
    assert "public.t: DIFFERENT: 1 rows only in PostgreSQL, 0 only in Delta" in capsys.readouterr().out
    assert main(["--config", str(cfg), "status"]) == 1  # (a difference verify found, not repaired yet)
    out = capsys.readouterr().out
    assert out.startswith("status: ATTENTION - 1 rows of public.t differ from its Delta table") and \
        "run `pgcdc repair public.t`" in out, out
    assert "test      public.t" in out
    assert main(["--config", str(cfg), "repair"]) == 0
    assert main(["--config", str(cfg), "status"]) == 0
    assert capsys.readouterr().out.split("status: ")[-1].startswith("OK - 1 table(s) synced; oldest pending change: ")


def test_crash_after_merge_then_idle_rerun_does_not_reapply(db: psycopg.Connection, syncer, monkeypatch) -> None:
    """A state file one batch behind Delta must not make a run with no new writes look idle."""
    db.execute("create table t (id int primary key, n int)")
    db.execute("insert into t values (1, 0)")
    capture.attach(db, "t")
    syncer.run()
    db.execute("update t set n = n + 1")
    run_crashing_at(syncer, monkeypatch, "after-merge")
    commits = syncer.commits("public.t")
    report = syncer.run()["public.t"]  # nothing new was written meanwhile
    assert (report.events, report.batches) == (0, 0)
    assert syncer.commits("public.t") == commits  # the committed batch was recognised, not merged again
    state_file = Path(syncer.path("public.t"), "_pgcdc", "test.json")
    import json

    assert json.loads(state_file.read_text())["batch"] == 2  # repaired from the commit history
    syncer.assert_equal("public.t")


def test_deleted_delta_log_is_refused_then_synced_again_once_the_folder_is_gone(db: psycopg.Connection,
                                                                                 syncer) -> None:
    db.execute("create table t (id int primary key)")
    db.execute("insert into t values (1), (2)")
    capture.attach(db, "t")
    syncer.run()
    shutil.rmtree(Path(syncer.path("public.t"), "_delta_log"))  # someone "resets" the Delta table
    with pytest.raises(TargetError, match="holds files but is not a Delta table"):
        syncer.run()
    shutil.rmtree(syncer.path("public.t"))
    report = syncer.run()["public.t"]
    assert report.copied == 2
    syncer.assert_equal("public.t")


def test_other_writer_committing_during_a_batch_fails_it_then_the_rerun_applies_it_once(
        db: psycopg.Connection, syncer, monkeypatch) -> None:
    db.execute("create table t (id int primary key, v text)")
    db.execute("insert into t select i, 'x' from generate_series(1, 20) i")
    capture.attach(db, "t")
    syncer.run()
    db.execute("update t set v = 'y' where id < 5")
    syncer.run()  # two data files now: the copy (with a deletion vector) and the batch's
    path = syncer.path("public.t")

    db.execute("update t set v = 'z' where id < 3")
    commits = syncer.commits("public.t")
    # another writer rewrites the files the batch marks
    run_with_writer_before_commit(syncer, monkeypatch, lambda: syncer.spark.sql(f"optimize delta.`{path}`"))
    assert syncer.commits("public.t") == commits + 1  # the OPTIMIZE only
    assert syncer.run()["public.t"].events == 1
    syncer.assert_equal("public.t")
    assert syncer.delta("public.t").count() == 20


def test_a_batch_whose_new_files_an_outside_vacuum_deletes_before_its_commit_fails_the_run(
        db: psycopg.Connection, syncer, monkeypatch) -> None:
    """VACUUM RETAIN 0 HOURS with the retention check off, run while a batch is paused before its
    commit, deletes the batch's new files (nobody's yet): the run fails at once, naming the table
    and the fix, instead of exiting 0 over an unreadable table; a resync repairs it."""
    import pgcdc.faults
    from pgcdc.lake import tablelog
    from pgcdc.sync.ingest import Job
    from pgcdc.sync.runs import resync_tables

    db.execute("create table t (id int primary key, v text)")
    db.execute("insert into t select i, 'x' from generate_series(1, 20) i")
    capture.attach(db, "t")
    syncer.run()
    path = syncer.path("public.t")
    db.execute("update t set v = 'y' where id < 5")
    syncer.run()  # a batch: a new data file and a deletion vector, both there
    version = tablelog.latest_version(syncer.spark, path)
    assert '"deletionVector"' in Path(path, "_delta_log", f"{version:020d}.json").read_text()
    assert tablelog.added_missing(syncer.spark, path, version) == []

    def vacuum(name: str) -> None:
        if name != "before-commit":
            return
        syncer.spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
        try:
            syncer.spark.sql(f"vacuum delta.`{path}` retain 0 hours")
        finally:
            syncer.spark.conf.unset("spark.databricks.delta.retentionDurationCheck.enabled")
    db.execute("update t set v = 'z' where id < 3")
    monkeypatch.setattr(pgcdc.faults, "failpoint", vacuum)
    with pytest.raises(TargetError, match=r"data files that batch \d+ of public.t just committed are gone .*"
                                          r"`pgcdc resync public.t`"):
        syncer.run()
    monkeypatch.undo()
    with pytest.raises(TargetError, match="references data files that are gone"):  # (and so does the next run)
        syncer.run()
    resync_tables(Job(syncer.settings(), syncer.spark, syncer.lines.append), ["public.t"])
    syncer.assert_equal("public.t")


def test_deletion_vectors_turned_off_by_another_tool_go_to_the_merge_engine(db: psycopg.Connection, syncer) -> None:
    """engine auto gives the table to the merge engine, saying why; engine fast refuses it in
    one line naming the merge engine, and commits nothing."""
    db.execute("create table t (id int primary key, v text)")
    db.execute("insert into t values (1, 'a'), (2, 'b')")
    capture.attach(db, "t")
    syncer.run()
    path = syncer.path("public.t")
    syncer.spark.sql(f"alter table delta.`{path}` set tblproperties ('delta.enableDeletionVectors' = 'false')")
    db.execute("update t set v = 'c' where id = 1")
    commits = syncer.commits("public.t")
    with pytest.raises(TargetError, match='engine = "fast" cannot apply .*no deletion vectors.*engine = "merge"'):
        syncer.run(engine="fast")
    assert syncer.commits("public.t") == commits
    syncer.lines.clear()
    assert syncer.run()["public.t"].events == 1
    assert "public.t: engine merge: the table has no deletion vectors (delta.enableDeletionVectors)" in syncer.lines
    syncer.assert_equal("public.t")
    assert syncer.commits("public.t") == commits + 1


def test_one_tables_failure_never_holds_the_others_back(db: psycopg.Connection, syncer) -> None:
    """A value no Delta type holds (a two-dimensional array, docs/types.md) fails its table
    only: the table after it is synced, the run exits with an error naming the table and
    column, status says so."""
    from pgcdc.checks.status import status_report

    db.execute("create table a_bad (id int primary key, v int[])")
    db.execute("create table b_good (id int primary key, v text)")
    db.execute("insert into a_bad values (1, '{{1,2},{3,4}}')")
    db.execute("insert into b_good values (1, 'y')")
    capture.attach(db, "a_bad")
    capture.attach(db, "b_good")
    with pytest.raises(Exception, match="pgcdc: column v of public.a_bad holds"):
        syncer.run()
    syncer.assert_equal("public.b_good")
    failed = [line for line in syncer.lines if line.startswith("public.a_bad: FAILED:")]
    assert failed and "An error occurred while calling" not in failed[0], failed
    report, healthy = status_report(db)
    assert not healthy and "1 of 2 table(s) failed: public.a_bad:" in report


@pytest.mark.parametrize("command", [["ingest"], ["resync", "public.missing"]])
def test_ingest_checks_the_source_before_starting_spark(conn: psycopg.Connection, dsn: str, tmp_path: Path,
                                                       command: list[str]) -> None:
    """pgcdc not installed (or a table not attached): the error comes at once, not after
    Spark's start and its screens of output."""
    cfg = tmp_path / "c.toml"
    cfg.write_text(f"[source]\ndsn = \"{dsn}\"\n[target]\nroot = \"{tmp_path}\"\n")
    proc = subprocess.run([sys.executable, "-m", "pgcdc", "--config", str(cfg), *command],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "pgcdc is not installed in database" in proc.stderr and "run `pgcdc install`" in proc.stderr
    assert "ivy" not in proc.stderr.lower() and "spark" not in proc.stderr.lower(), proc.stderr[-2000:]


@pytest.mark.parametrize("mode", ["strict", "out_of_order"])
def test_printed_watermark_is_the_stored_one_and_never_goes_down(db: psycopg.Connection, syncer, dsn: str,
                                                                 mode: str) -> None:
    """An idle table's watermark moves up with the database's txids: what a run prints is what
    its mirror keeps (the next run starts from it, sync/plan.py with_mirror), so it never goes down."""
    db.execute("create table t (id int primary key)")
    db.execute("create table other (id int primary key)")
    capture.attach(db, "t")
    capture.attach(db, "other")
    db.execute("insert into t values (1)")
    seen = []
    with psycopg.connect(dsn) as long_tx:
        for i in range(4):
            db.execute("insert into other values (%s)", (i,))  # txids move on; t stays idle
            if i == 1:
                long_tx.execute("insert into other values (100)")  # held open: holds txmin back
            report = syncer.run(mode=mode)["public.t"]
            assert report.watermark == db.execute("select watermark::text::bigint from pgcdc.consumer_state "
                                                  "where table_id = (select table_id from pgcdc.attached "
                                                  "where relid = 't'::regclass)").fetchone()[0]
            seen.append(report.watermark)
        long_tx.commit()
    report = syncer.run(mode=mode)["public.t"]
    seen.append(report.watermark)
    assert seen == sorted(seen) and seen[-1] > seen[0], seen
    syncer.assert_equal("public.t")
