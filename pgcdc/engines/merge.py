"""The merge engine: a batch applied with Delta's public `DeltaTable.merge`, on any Delta build.

Each of the batch's keys comes with its current row, or none (enrich.batch_query): a
matched key with a row is updated, a matched key without one deleted (with soft deletes,
marked deleted, its values kept: lake/landing.py), a new key with a row inserted. Delta
itself writes the commit: deletion vectors where the table has them (else rewritten files),
the change data feed (`update_preimage`/`update_postimage`) and row ids where the table has
them. What it has that a hand-written MERGE lacks:

- the condition bounds the target's key to the batch's key range (a one-column integer
  key), so Delta skips the files outside it; a fan-in source's, to its shard's partition;
- the batch is read from PostgreSQL once (into Spark's cache) and MERGE reads that,
  instead of materializing its source again;
- the consumer state rides in the same commit: Delta's idempotent-write confs
  (txnAppId/txnVersion, a `txn` action) and commitInfo.userMetadata (target.state_commit).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pgcdc import faults
from pgcdc.errors import TargetError
from pgcdc.lake import landing, shards, tablelog
from pgcdc.lake.paths import spark_ident as _col
from pgcdc.lake.state import app_id
from pgcdc.lake.target import Written, conflicts, last_commit, session_confs, state_commit
from pgcdc.source import enrich

if TYPE_CHECKING:
    from pyspark.sql import Column

    from pgcdc.engines.work import BatchWork, CopyWork


class MergeEngine:
    """Applies a batch with DeltaTable.merge (see the module docstring)."""

    name = "merge"

    def apply(self, work: "BatchWork") -> Written:
        from delta.tables import DeltaTable
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        spark, path, state = work.spark, work.path, work.state
        if tablelog.txn_version(spark, path, app_id(state.key)) >= state.batch:
            raise TargetError(f"batch {state.batch} of consumer {state.consumer} is already committed to {path}: "
                              "is a second ingest running elsewhere?")
        bounds = enrich.key_bounds(work.reader, work.table, work.batch)
        read = work.read
        keys = read.key_columns
        source = read.frame.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            source.count()  # every row read before the commit is announced (before_commit)
            condition = " and ".join(f"t.{_col(k)} = s.{_col(enrich.KEY_PREFIX + k)}" for k in keys)
            if bounds is not None:  # target-only conjuncts: Delta skips files by their key range
                condition += f" and t.{_col(keys[0])} between {int(bounds[0])} and {int(bounds[1])}"
            live = f"s.{_col(keys[0])} is not null"  # (a key column is never null in a current row)
            values: dict[str, str | Column] = {_col(f.name): f"s.{_col(f.name)}" for f in read.schema.fields}
            txid = F.col(f"s.{_col(enrich.TXID)}")  # (the batch read has it when the landing asks)
            values |= {_col(name): value for name, value in work.landing.live_values(txid).items()}
            if state.shard is not None:  # a fan-in source: its rows alone (its partition: lake/shards.py)
                condition += f" and t.{shards.where(state.shard)}"
                values[shards.SHARD] = str(int(state.shard))
            work.before_commit()
            faults.failpoint("before-commit")
            merge = DeltaTable.forPath(spark, path).alias("t").merge(source.alias("s"), condition)
            if work.landing.soft_deletes:  # a key gone keeps its last values, marked once (lake/landing.py)
                merge = merge.whenMatchedUpdate(f"not ({live}) and not t.{_col(landing.DELETED)}",
                                                {_col(n): v for n, v in work.landing.gone_values(txid).items()})
            else:
                merge = merge.whenMatchedDelete(f"not ({live})")
            merge = merge.whenMatchedUpdate(live, values).whenNotMatchedInsert(live, values)
            # the source is cached: MERGE need not materialize it again
            with state_commit(spark, state), session_confs(spark, {"spark.databricks.delta.merge.materializeSource":
                                                            "none"}), conflicts(path, f"batch {state.batch}"):
                merge.execute()
        finally:
            source.unpersist()
        return last_commit(spark, path, state)

    def copy(self, work: "CopyWork") -> Written | None:
        """Every copy is Spark's overwrite (public API only)."""
        return None

    def finish(self, path: str) -> None:
        """Nothing of its own beside the table."""


ENGINE = MergeEngine()
