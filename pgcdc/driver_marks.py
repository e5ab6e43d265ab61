"""Small batches: find the stored rows of a batch's keys and write their deletion vectors
on the driver, without a Spark job.

For a batch of a few thousand keys, Spark's way (a broadcast of the keys, a scan joined
to them, an aggregation of row positions into bitmaps per file, a job writing the
vectors) costs ~0.5-1 s in job set-up, whatever the batch's size. Here the driver reads
the key column of each candidate file with pyarrow (from the file's key index once
there is one, see key_index.py), takes the positions of the batch's keys, and hands
them to Delta's own deletion-vector writer (merged with a file's existing vector,
stored in one new file). The result is what Spark's way returns, and
takes the same path to the commit.

Only where that is as exact as the Spark path: a one-column key held as integers or
text, files on the local file system, no column mapping. Everything else (and every
large batch, whose keys must not gather on the driver) takes the Spark path.
"""

from __future__ import annotations

import os
import struct
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from pgcdc import key_index
from pgcdc.jvm import cls, none, seq, some

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


def _positions(table_dir: str, path: str, column: str, keys: list[Any]) -> list[int]:
    """The row positions (ascending) in the Parquet file whose `column` value is one of
    `keys` (every physical row counts, deleted ones included, as Delta's row index does)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    stored = key_index.key_column(table_dir, path, column)
    if not (pa.types.is_integer(stored.type) or pa.types.is_string(stored.type)
            or pa.types.is_large_string(stored.type)):
        raise TypeError(f"{path}: key column {column} is stored as {stored.type}, not as integers or text")
    return pc.indices_nonzero(pc.is_in(stored, value_set=pa.array(keys, type=stored.type))).to_pylist()


_DV_MAGIC = 1681511377       # Delta's RoaringBitmapArray, portable format (PROTOCOL.md, Deletion Vector Format)
_NO_RUN_COOKIE = 12346       # RoaringFormatSpec: a 32-bit bitmap without run containers
_ARRAY_MAX = 4096            # up to this many values a container is a sorted uint16 array, above a 2^16-bit bitmap


def portable_bitmap(positions: list[int]) -> bytes:
    """Delta's serialized deletion-vector bitmap of ascending, distinct row positions.

    Built here because a byte array returned through Py4J of ~8 KB or more waits ~40 ms
    (a TCP delayed acknowledgement) per call; Delta's writer checks and stores it."""
    buckets: dict[int, list[int]] = {}
    for p in positions:
        buckets.setdefault(p >> 32, []).append(p & 0xFFFFFFFF)
    parts = [struct.pack("<iq", _DV_MAGIC, len(buckets))]
    for key in sorted(buckets):
        parts += [struct.pack("<i", key), _roaring32(buckets[key])]
    return b"".join(parts)


def _roaring32(values: list[int]) -> bytes:
    """A 32-bit RoaringBitmap of ascending, distinct values in the standard portable format."""
    containers: dict[int, list[int]] = {}
    for v in values:
        containers.setdefault(v >> 16, []).append(v & 0xFFFF)
    keys = sorted(containers)
    bodies = []
    for key in keys:
        lows = containers[key]
        if len(lows) <= _ARRAY_MAX:
            bodies.append(struct.pack(f"<{len(lows)}H", *lows))
        else:
            bits = bytearray(8192)
            for v in lows:
                bits[v >> 3] |= 1 << (v & 7)
            bodies.append(bytes(bits))
    header = [struct.pack("<II", _NO_RUN_COOKIE, len(keys))]
    header += [struct.pack("<HH", key, len(containers[key]) - 1) for key in keys]
    offset = 8 + 8 * len(keys)  # cookie and count, then per container: key/cardinality and offset
    for body in bodies:
        header.append(struct.pack("<I", offset))
        offset += len(body)
    return b"".join(header + bodies)


def deletion_vectors(spark: "SparkSession", txn: Any, files: list[Any], paths: list[str], column: str,
                     keys: list[Any]) -> Any:
    """Deletion vectors (a Scala Seq of Delta's DeletionVectorResult, written to storage)
    over every row of `files` whose `column` is in `keys`; files without such a row are left out."""
    vector_data = cls(spark, "org.apache.spark.sql.delta.commands.DeletionVectorData")
    spark_path = cls(spark, "org.apache.spark.paths.SparkPath")
    log = txn.deltaLog()
    table_dir = log.dataPath().toUri().getPath()
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:  # pyarrow reads and matches outside the GIL
        found = list(pool.map(lambda path: _positions(table_dir, path, column, keys), paths))
    data = []
    for add, positions in zip(files, found):
        if not positions:
            continue
        existing = add.deletionVector()
        data.append(vector_data(spark_path.fromPath(add.absolutePath(log)).urlEncoded(),
                                some(spark, existing.serializeToBase64()) if existing is not None else none(spark),
                                portable_bitmap(positions), len(positions)))
    if not data:
        return seq(spark, [])
    store = cls(spark, "org.apache.spark.sql.delta.commands.DeletionVectorWriter").createMapperToStoreDeletionVectors(
        spark._jsparkSession, log.newDeltaHadoopConf(), log.dataPath(),
        cls(spark, "org.apache.spark.sql.delta.util.Utils").getRandomPrefixLength(txn.metadata()))
    return store.apply(seq(spark, data).iterator()).toList()  # strict: every vector written now
