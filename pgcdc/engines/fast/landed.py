"""The rows the fast engine writes for a batch of a table that holds pgcdc's columns
(`[target] deletes = "soft"`, `metadata_columns`; their values are decided in lake/landing.py).

The fast engine replaces every stored row of the batch's keys (a deletion vector over it) with
the rows it writes. So where the merge engine updates a gone key's row in place, this writes
that row again, marked: the stored row as the transaction's snapshot holds it (read with
Delta's public reader at that version), with `_pgcdc_deleted` and the rest set, its values
kept; a row marked already is written as it was. Each live row gets the values a MERGE's
update or insert would give it.

The batch's relation must be read once (persisted by the caller): its live rows and its gone
keys are two views of one read, so a row PostgreSQL changes meanwhile cannot land twice or
not at all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pgcdc.lake.paths import spark_ident
from pgcdc.source.enrich import KEY_PREFIX, TXID

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from pgcdc.lake.landing import Landing
    from pgcdc.source.batch_read import BatchRead


def rows(spark: "SparkSession", path: str, version: int, read: "BatchRead", landing: "Landing",
         bounds: tuple[int, int] | None) -> "DataFrame":
    """The rows to write for the batch `read` into the table at `path`, whose snapshot the commit
    reads is `version`; `bounds` (lowest, highest key of a one-column integer key) lets the
    stored rows outside them be skipped."""
    from pyspark.sql import functions as F

    keys, frame = read.key_columns, read.frame
    fields = landing.schema(read.schema).fields
    live = F.col(spark_ident(keys[0])).isNotNull()
    txid = F.col(spark_ident(TXID)) if landing.metadata else F.lit(None)
    written = landing.live(frame.where(live), txid).select(*[spark_ident(f.name) for f in fields])
    if not landing.soft_deletes:
        return written
    gone = frame.where(~live).select(*[F.col(spark_ident(KEY_PREFIX + k)).alias(k) for k in keys],
                                     txid.alias(TXID))
    if gone.isEmpty():
        return written
    stored = spark.read.format("delta").option("versionAsOf", version).load(path)
    if bounds is not None:
        stored = stored.where(F.col(spark_ident(keys[0])).between(int(bounds[0]), int(bounds[1])))
    old = stored.join(gone, on=keys)
    return written.unionByName(landing.marked(old, fields, F.col(spark_ident(TXID))))
