"""What a Delta table changed after a version (lake/changed.py, lake/vectors.py): deletes and
updates marked in deletion vectors, inserts, a file removed whole, a RESTORE that shows hidden
rows again, an OPTIMIZE; on a local table (rows found by position from the vectors) and on the
suite's S3 server (Spark compares keys). The oracle compares the two versions' whole rows with
plain Spark."""

from __future__ import annotations

import uuid

import numpy as np
import pytest

from pgcdc.lake import vectors
from pgcdc.lake.changed import changed_since


def _differ(spark, path: str, since: int, latest: int) -> set[int]:
    """The oracle: ids whose row (id, v) one version holds and the other does not."""
    a = spark.read.format("delta").option("versionAsOf", since).load(path)
    b = spark.read.format("delta").option("versionAsOf", latest).load(path)
    return {r.id for r in a.exceptAll(b).union(b.exceptAll(a)).select("id").collect()}


def _history(spark, path: str) -> tuple[list[int], set[int]]:
    """Writes of every kind, as a sync and other writers would; the versions, and those an
    OPTIMIZE made (its files' rows are read again, unchanged: allowed more)."""
    spark.range(0, 3000, numPartitions=3).selectExpr("id", "cast(id % 7 as int) v").write.format("delta") \
        .option("delta.enableDeletionVectors", "true").save(path)
    t = f"delta.`{path}`"
    for statement in (f"delete from {t} where id % 100 = 1",
                      f"update {t} set v = -1 where id % 100 = 2",
                      f"insert into {t} select id, 9 from range(5000, 5010)",
                      f"delete from {t} where id >= 2000 and id < 3000",
                      f"restore table {t} to version as of 1",
                      f"update {t} set v = -2 where id % 250 = 3",
                      f"optimize {t}",
                      f"delete from {t} where id = 17"):
        spark.sql(statement)
    versions = [r.version for r in spark.sql(f"describe history {t}").collect()]
    optimized = {r.version for r in spark.sql(f"describe history {t}").collect() if r.operation == "OPTIMIZE"}
    return sorted(versions), optimized


@pytest.mark.parametrize("where", ["local", "local-spark", "s3"])
def test_the_keys_changed_since_a_version_are_the_rows_that_differ(spark, tmp_path, s3_server, monkeypatch,
                                                                  where: str) -> None:
    """local: the rows' positions from the deletion vectors, their keys read on the driver;
    local-spark: the same positions read by Spark (as for keys of other types); s3: Spark
    compares the touched files' keys at both versions."""
    from pgcdc.lake import changed

    if where == "local-spark":
        monkeypatch.setattr(changed, "_read_on_driver", lambda *args: None)
    path = str(tmp_path / "t") if where != "s3" else f"s3a://{s3_server.bucket}/changed-{uuid.uuid4().hex[:8]}/t"
    versions, optimized = _history(spark, path)
    latest = versions[-1]
    # (but locally, three of them: each version read costs seconds of CI time)
    for since in versions[:-1] if where == "local" else [versions[0], versions[4], versions[-2]]:
        found = changed_since(spark, path, since, ["id"])
        assert not isinstance(found, str), found
        got = [r.id for r in found.collect()]
        assert len(got) == len(set(got)), f"a key named twice since {since}"
        want = _differ(spark, path, since, latest)
        assert want <= set(got), f"since version {since}: {sorted(want - set(got))[:10]} missed"
        if since >= max(optimized):  # (before it, the OPTIMIZE's files are read again whole)
            assert set(got) == want, f"since version {since}: {sorted(set(got) - want)[:10]} more"


def test_deletion_vectors_read_from_files_give_the_positions_delta_hides(spark, tmp_path) -> None:
    """Each vector of a table Spark wrote with deletion vectors, parsed here, hides as many rows
    as its descriptor's cardinality says, and the rows Spark no longer shows are those."""
    import json

    path = str(tmp_path / "dv")
    spark.range(0, 200000, numPartitions=2).selectExpr("id").write.format("delta") \
        .option("delta.enableDeletionVectors", "true").save(path)
    spark.sql(f"delete from delta.`{path}` where id % 3 = 0 or (id > 1000 and id < 70000)")  # (sparse and dense)
    log = sorted((tmp_path / "dv" / "_delta_log").glob("*.json"))[-1]
    adds = [json.loads(line)["add"] for line in log.read_text().splitlines() if '"add"' in line]
    assert adds and all(a.get("deletionVector") for a in adds)
    shown = spark.read.format("delta").load(path).selectExpr("_metadata.file_name f", "_metadata.row_index r")
    for add in adds:
        hidden = vectors.hidden(path, add["deletionVector"])
        assert len(hidden) == add["deletionVector"]["cardinality"]
        name = add["path"].rsplit("/", 1)[-1]
        rows = spark.read.parquet(f"{path}/{add['path']}").count()
        visible = np.array(sorted(r.r for r in shown.where(f"f = '{name}'").collect()), dtype=np.uint64)
        assert np.array_equal(np.setdiff1d(np.arange(rows, dtype=np.uint64), visible), hidden)
