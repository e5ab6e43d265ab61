"""The txn version and file list read from Delta's checksum file agree with Delta's own
state reconstruction, and batches stay exact when the checksum lacks them."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from pgcdc import capture, deltalog
from pgcdc.errors import TargetError
from pgcdc.jvm import pylist

THRESHOLD = "spark.databricks.delta.allFilesInCrc.thresholdNumFiles"


def _sync_a_few_batches(db: psycopg.Connection, syncer) -> None:
    db.execute("create table t (id int primary key, v text)")
    db.execute("insert into t select i, 'a' from generate_series(1, 30) i")
    capture.attach(db, "t")
    syncer.run()
    for v in ("b", "c"):
        db.execute("update t set v = %s where id %% 3 = 0", (v,))
        db.execute("delete from t where id = (select max(id) from t)")
        syncer.run()


def test_checksum_answers_match_the_state_reconstruction(db: psycopg.Connection, syncer) -> None:
    _sync_a_few_batches(db, syncer)
    jvm = syncer.spark._jvm
    log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(syncer.spark._jsparkSession, syncer.path("public.t"))
    snapshot = log.update(False, jvm.scala.Option.empty(), jvm.scala.Option.empty())
    assert snapshot.checksumOpt().isDefined()  # Delta wrote it: the answers below come from it
    assert deltalog.committed_version(snapshot, "pgcdc:test") == snapshot.transactions().get("pgcdc:test").get() == 3
    assert deltalog.committed_version(snapshot, "pgcdc:other") == -1
    from_checksum = pylist(syncer.spark, deltalog.read_all_files(log.startTransaction()))
    reconstructed = pylist(syncer.spark, log.startTransaction().filterFiles())
    assert sorted((a.path(), a.deletionVector() and a.deletionVector().cardinality()) for a in from_checksum) == \
        sorted((a.path(), a.deletionVector() and a.deletionVector().cardinality()) for a in reconstructed)
    assert len(from_checksum) >= 3


@pytest.mark.parametrize("missing", ["checksum files", "file list"])
def test_batches_stay_exact_without_the_checksum(db: psycopg.Connection, syncer, missing: str) -> None:
    """Another tool may write the table without checksums, or the table may have more
    files than Delta lists in them: the batch then asks Delta's state reconstruction."""
    _sync_a_few_batches(db, syncer)
    log_dir = Path(syncer.path("public.t")) / "_delta_log"
    try:
        if missing == "checksum files":
            for crc in log_dir.glob("*.crc"):
                crc.unlink()
            syncer.spark._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()
        else:
            syncer.spark.conf.set(THRESHOLD, "1")
        for v in ("d", "e"):
            db.execute("update t set v = %s where id %% 2 = 0", (v,))
            db.execute("insert into t values ((select max(id) + 1 from t), %s)", (v,))
            assert syncer.run()["public.t"].events == 2
            syncer.assert_equal("public.t")
        assert syncer.run()["public.t"].events == 0
    finally:
        syncer.spark.conf.unset(THRESHOLD)
    assert syncer.delta("public.t").count() == db.execute("select count(*) from t").fetchone()[0]


def test_another_commit_of_the_same_consumer_during_a_batch_fails_it(db: psycopg.Connection, syncer,
                                                                      monkeypatch) -> None:
    """The txn version read from the checksum is recorded as read: a commit carrying the
    consumer's app id (a second, misconfigured job) makes the batch's commit fail, and
    the next run refuses the batch number the other job took."""
    import pgcdc.faults

    _sync_a_few_batches(db, syncer)
    path = syncer.path("public.t")

    def other_job(name: str) -> None:
        if name == "before-commit":  # an empty idempotent write with the consumer's app id
            syncer.spark.range(0).selectExpr("cast(id as int) id", "'x' v").write.format("delta").mode("append") \
                .option("txnAppId", "pgcdc:test").option("txnVersion", 4).save(path)
    monkeypatch.setattr(pgcdc.faults, "failpoint", other_job)
    db.execute("insert into t values (1000, 'new')")
    commits = syncer.commits("public.t")
    with pytest.raises(TargetError, match="changed by another writer"):
        syncer.run()
    monkeypatch.undo()
    assert syncer.commits("public.t") == commits + 1  # the other job's only
    with pytest.raises(TargetError, match="records batch 4 of consumer test but its state is neither"):
        syncer.run()  # that job claimed batch 4: this one refuses to run beside it
    assert syncer.delta("public.t").where("id = 1000").count() == 0
