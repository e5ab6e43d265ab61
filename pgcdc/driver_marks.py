"""Small batches: find the stored rows of a batch's keys and write their deletion vectors
on the driver, without a Spark job.

For a batch of a few thousand keys, Spark's way (a broadcast of the keys, a scan joined
to them, an aggregation of row positions into bitmaps per file, a job writing the
vectors) costs ~0.5-1 s in job set-up, whatever the batch's size. Here the driver reads
the key column of each candidate file with pyarrow, takes the positions of the batch's
keys, and hands them to Delta's own deletion-vector writer (merged with a file's
existing vector, stored in one new file). The result is what Spark's way returns, and
takes the same path to the commit.

Only where that is as exact as the Spark path: a one-column key held as integers or
text, files on the local file system, no column mapping. Everything else (and every
large batch, whose keys must not gather on the driver) takes the Spark path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pgcdc.jvm import none, seq, some

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def local_paths(txn: Any, files: list[Any]) -> list[str] | None:
    """Each file's local path, or None if any file is not on the local file system."""
    paths = []
    for add in files:
        uri = add.absolutePath(txn.deltaLog()).toUri()
        if uri.getScheme() not in (None, "file"):
            return None
        paths.append(uri.getPath())
    return paths


def _positions(path: str, column: str, keys: list[Any]) -> bytes:
    """The row positions in the Parquet file whose `column` value is one of `keys`, as
    little-endian int64s (every physical row counts, deleted ones included, as Delta's
    row index does)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    stored = pq.read_table(path, columns=[column]).column(0)
    if not (pa.types.is_integer(stored.type) or pa.types.is_string(stored.type)
            or pa.types.is_large_string(stored.type)):
        raise TypeError(f"{path}: key column {column} is stored as {stored.type}, not as integers or text")
    found = pc.indices_nonzero(pc.is_in(stored, value_set=pa.array(keys, type=stored.type)))
    return found.cast(pa.int64()).buffers()[1].to_pybytes()[:8 * len(found)]


def deletion_vectors(spark: "SparkSession", txn: Any, files: list[Any], paths: list[str], column: str,
                     keys: list[Any]) -> Any:
    """Deletion vectors (a Scala Seq of Delta's DeletionVectorResult, written to storage)
    over every row of `files` whose `column` is in `keys`; files without such a row are left out."""
    jvm = spark._jvm
    delta = jvm.org.apache.spark.sql.delta
    bitmap_format = delta.deletionvectors.RoaringBitmapArrayFormat.Portable()
    log = txn.deltaLog()
    data = []
    for add, path in zip(files, paths):
        raw = _positions(path, column, keys)
        if not raw:
            continue
        count = len(raw) // 8
        positions = spark.sparkContext._gateway.new_array(jvm.long, count)
        buffer = jvm.java.nio.ByteBuffer.wrap(raw)
        buffer.order(jvm.java.nio.ByteOrder.LITTLE_ENDIAN)
        buffer.asLongBuffer().get(positions)
        bitmap = delta.deletionvectors.RoaringBitmapArray.apply(
            jvm.scala.collection.immutable.ArraySeq.unsafeWrapArray(positions))
        existing = add.deletionVector()
        data.append(delta.commands.DeletionVectorData(
            jvm.org.apache.spark.paths.SparkPath.fromPath(add.absolutePath(log)).urlEncoded(),
            some(spark, existing.serializeToBase64()) if existing is not None else none(spark),
            bitmap.serializeAsByteArray(bitmap_format), count))
    if not data:
        return seq(spark, [])
    store = delta.commands.DeletionVectorWriter.createMapperToStoreDeletionVectors(
        spark._jsparkSession, log.newDeltaHadoopConf(), log.dataPath(),
        delta.util.Utils.getRandomPrefixLength(txn.metadata()))
    return store.apply(seq(spark, data).iterator()).toList()  # strict: every vector written now
