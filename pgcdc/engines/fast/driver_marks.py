"""Find the stored rows of a batch's keys and write their deletion vectors on the driver,
without a Spark job.

Spark's way (a broadcast of the keys, a scan joined to them, an aggregation of row
positions into bitmaps per file, a job writing the vectors) costs ~0.5-1 s in job
set-up whatever the batch, and ~2 s of two cores for 1M keys over a 5M-row table. Here
the driver searches the key column of each candidate file with pyarrow (from the
file's key index, see key_index.py), turns each file's match mask into Delta's bitmap,
and hands them to Delta's own deletion-vector writer (merged with a file's existing
vector, stored in one new file). The result is what Spark's way returns, and takes the
same path to the commit.

Only where that is as exact as the Spark path: key columns held as integers or text,
files on the local file system (with column mapping, read by the key columns' physical names:
deltalog.Opened.physical_names); and up to `ingest.driver_keys` keys,
which the driver holds as one Arrow table (as many as a Spark broadcast join would
gather on it). Everything else takes the Spark path.
"""

from __future__ import annotations

import os
import struct
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from pgcdc.engines.fast import key_index
from pgcdc.spark.jvm import cls, kept, none, seq, some

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

    from pgcdc.engines.fast.deltalog import Opened


def local_paths(o: "Opened", files: list[Any]) -> list[str] | None:
    """Each file's local path, or None if any file is not on the local file system. A path
    relative to the table (Delta's own, URI-encoded) is decoded here: asking Hadoop costs four
    Py4J round trips a file, in every batch."""
    if o.scheme not in (None, "file"):
        return None
    log = None
    paths = []
    for add in files:
        relative = add.path()
        if ":" not in relative and not relative.startswith("/"):
            paths.append(os.path.join(o.table_dir, unquote(relative)))
            continue
        log = log or o.txn.deltaLog()
        uri = add.absolutePath(log).toUri()
        if uri.getScheme() not in (None, "file"):
            return None
        paths.append(uri.getPath())
    return paths


def _masks(table_dir: str, paths: list[str], columns: list[str], keys: "pa.Table") -> list["pa.BooleanArray"]:
    """For each file, which of its rows hold one of `keys` (in the key `columns`): one
    boolean per physical row in file order (deleted rows included, as Delta's row index
    counts them). A key of several columns is found by one hash join (_composite_masks).

    Integer keys in a compact range are looked up in a table indexed by key (_key_table).
    Other keys are searched with a hash set, in one group of files per core (pyarrow
    searches outside the GIL), each group with one set of the keys, or in one group for
    many keys: building the set costs ~6x searching one stored key (1M keys: 0.19 s; 8M
    stored keys searched: 0.23 s), so a second set pays only while the keys are few next
    to the rows."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if len(columns) > 1:
        return _composite_masks(table_dir, paths, columns, keys)
    column, one = columns[0], keys.column(0).combine_chunks()
    workers = os.cpu_count() or 1
    with ThreadPoolExecutor(max_workers=workers) as pool:
        stored = list(pool.map(lambda path: key_index.key_column(table_dir, path, column), paths))
        if not stored:
            return []
        kind = stored[0].type
        if not (pa.types.is_integer(kind) or pa.types.is_string(kind) or pa.types.is_large_string(kind)) \
                or any(c.type != kind for c in stored):
            raise TypeError(f"key column {column} is stored as {sorted({str(c.type) for c in stored})}, "
                            "not as one integer or text type")
        table = _key_table(one) if pa.types.is_integer(kind) else None
        if table is not None:
            return list(pool.map(table, stored))
        value_set = one.cast(kind)  # the same values: both are the key as the table holds it
        total = sum(len(c) for c in stored)
        if len(one) * 16 > total:  # a second set would cost more than the search it shares
            workers = 1
        groups: list[list[int]] = [[] for _ in range(workers)]
        seen = 0
        for i, c in enumerate(stored):  # consecutive files, about the same number of rows per group
            groups[min(workers - 1, seen * workers // max(total, 1))].append(i)
            seen += len(c)

        def search(group: list[int]) -> list["pa.BooleanArray"]:
            found = pc.is_in(pa.chunked_array([ch for i in group for ch in stored[i].chunks], type=kind),
                             value_set=value_set)
            masks, offset = [], 0
            for i in group:
                masks.append(_fresh(found.slice(offset, len(stored[i])).combine_chunks()))
                offset += len(stored[i])
            return masks
        return [m for part in pool.map(search, [g for g in groups if g]) for m in part]


def _composite_masks(table_dir: str, paths: list[str], columns: list[str], keys: "pa.Table") -> list["pa.BooleanArray"]:
    """_masks for a key of several columns: every file's key columns with their file and row
    numbers, semi-joined to the keys (a hash table of the keys, which are few next to the
    rows: Arrow builds it on the right side), then each file's matched rows as its mask."""
    import numpy as np
    import pyarrow as pa

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        stored = list(pool.map(lambda path: key_index.key_columns(table_dir, path, columns), paths))
    if not stored:
        return []
    kinds = [stored[0].schema.field(c).type for c in columns]
    for c, kind in zip(columns, kinds):
        if not (pa.types.is_integer(kind) or pa.types.is_string(kind) or pa.types.is_large_string(kind)) \
                or any(t.schema.field(c).type != kind for t in stored):
            raise TypeError(f"key column {c} is stored as {sorted({str(t.schema.field(c).type) for t in stored})}, "
                            "not as one integer or text type")
    sizes = [t.num_rows for t in stored]
    whole = pa.concat_tables(stored).combine_chunks()
    whole = whole.append_column("__pgcdc_file", pa.array(np.repeat(np.arange(len(stored), dtype=np.int32), sizes)))
    whole = whole.append_column("__pgcdc_row", pa.array(np.concatenate(
        [np.arange(n, dtype=np.int64) for n in sizes]) if sizes else np.zeros(0, dtype=np.int64)))
    wanted = pa.table({c: keys.column(c).cast(kind) for c, kind in zip(columns, kinds)})
    hits = whole.join(wanted, keys=columns, join_type="left semi")
    files, rows = hits.column("__pgcdc_file").to_numpy(), hits.column("__pgcdc_row").to_numpy()
    masks = []
    for i, n in enumerate(sizes):
        mask = np.zeros(n, dtype=bool)
        mask[rows[files == i]] = True
        masks.append(pa.array(mask, type=pa.bool_()))
    return masks


_TABLE_SLOTS = 1 << 24  # a key table of up to this many slots (bytes) is built whatever the number of keys


def _key_table(keys: "pa.Array") -> "Callable[[pa.ChunkedArray], pa.BooleanArray] | None":
    """For integer keys whose range spans at most 32 values per key (or _TABLE_SLOTS): a
    search that marks each stored key found in a table holding one boolean per value of
    the range; None for other keys. No hashing: 1M keys searched in 51M stored ones
    took 0.24 s, with a hash set 1.4 s."""
    import numpy as np
    import pyarrow as pa

    if len(keys) == 0 or not pa.types.is_integer(keys.type):
        return None
    values = keys.cast(pa.int64()).to_numpy()
    low, high = int(values.min()), int(values.max())
    size = high - low + 1
    if size > max(32 * len(keys), _TABLE_SLOTS):
        return None
    present = np.zeros(size + 1, dtype=bool)  # the last slot stands for every key outside the range
    present[values - low] = True

    def search(stored: "pa.ChunkedArray") -> "pa.BooleanArray":
        found = [np.zeros(0, dtype=bool)]
        for chunk in stored.chunks:
            # a stored key below the range wraps around to a huge slot: it lands on the last one
            slots = (chunk.to_numpy().astype(np.int64, copy=False) - low).view(np.uint64)
            np.minimum(slots, size, out=slots)
            found.append(present[slots])
        return pa.array(np.concatenate(found), type=pa.bool_())
    return search


def _fresh(mask: "pa.BooleanArray") -> "pa.BooleanArray":
    """`mask` with its bits starting at bit 0 of its buffer (a slice may start mid-byte)."""
    import pyarrow.compute as pc

    return mask if mask.offset == 0 else pc.invert(pc.invert(mask))


_DV_MAGIC = 1681511377       # Delta's RoaringBitmapArray, portable format (PROTOCOL.md, Deletion Vector Format)
_NO_RUN_COOKIE = 12346       # RoaringFormatSpec: a 32-bit bitmap without run containers
_ARRAY_MAX = 4096            # up to this many values a container is a sorted uint16 array, above a 2^16-bit bitmap
_BLOCK = 1 << 16             # values per container
_BUCKET = 1 << 32            # positions one 32-bit bitmap holds


def portable_bitmap(mask: "pa.BooleanArray") -> bytes:
    """Delta's serialized deletion-vector bitmap of the positions where `mask` is true.

    Built here because a byte array returned through Py4J of ~8 KB or more waits ~40 ms
    (a TCP delayed acknowledgement) per call; Delta's writer checks and stores it. A
    dense container is the mask's own bits (Arrow and Roaring both number bits from the
    lowest of each little-endian byte); a sparse one lists the positions as uint16."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if len(mask) > _BUCKET:  # positions past 2^32 would need more than one 32-bit bitmap
        raise ValueError(f"a data file of {len(mask)} rows: the driver path handles up to 2^32")
    if sys.byteorder != "little":  # Arrow buffers are in the machine's order, the format is little-endian
        raise RuntimeError("deletion vectors are built on the driver only on little-endian machines")
    mask = _fresh(mask)
    bits = mask.buffers()[1]
    keys, cards, bodies = [], [], []
    for key in range(-(-len(mask) // _BLOCK)):
        block = mask.slice(key * _BLOCK, _BLOCK)
        count = block.true_count
        if count == 0:
            continue
        if count <= _ARRAY_MAX:
            lows = pc.indices_nonzero(block).cast(pa.uint16())
            body = lows.buffers()[1][lows.offset * 2:(lows.offset + count) * 2].to_pybytes()
        else:
            start = key * _BLOCK // 8
            dense = bytearray(bits[start:start + -(-len(block) // 8)].to_pybytes())
            if len(block) % 8:  # bits past the mask's end are not defined
                dense[-1] &= (1 << (len(block) % 8)) - 1
            body = bytes(dense).ljust(_BLOCK // 8, b"\0")
        keys.append(key)
        cards.append(count)
        bodies.append(body)
    if not keys:
        return struct.pack("<iq", _DV_MAGIC, 0)
    header = [struct.pack("<iq", _DV_MAGIC, 1), struct.pack("<i", 0), struct.pack("<II", _NO_RUN_COOKIE, len(keys))]
    header += [struct.pack("<HH", key, card - 1) for key, card in zip(keys, cards)]
    offset = 8 + 8 * len(keys)  # cookie and count, then per container: key/cardinality and offset
    for body in bodies:
        header.append(struct.pack("<I", offset))
        offset += len(body)
    return b"".join(header + bodies)


def deletion_vectors(spark: "SparkSession", o: "Opened", files: list[Any], paths: list[str], columns: list[str],
                     keys: "pa.Table") -> Any:
    """Deletion vectors (a Scala Seq of Delta's DeletionVectorResult, written to storage)
    over every row of `files` whose key `columns` are one of `keys`; files without such a
    row are left out."""
    vector_data = cls(spark, "org.apache.spark.sql.delta.commands.DeletionVectorData")
    spark_path = cls(spark, "org.apache.spark.paths.SparkPath")
    txn = o.txn
    log = txn.deltaLog()
    table_dir = o.table_dir
    data = []
    for add, mask in zip(files, _masks(table_dir, paths, columns, keys)):
        count = mask.true_count
        if not count:
            continue
        existing = add.deletionVector()
        data.append(vector_data(spark_path.fromPath(add.absolutePath(log)).urlEncoded(),
                                some(spark, existing.serializeToBase64()) if existing is not None else none(spark),
                                portable_bitmap(mask), count))
    return seq(spark, _stored(spark, o, log, data) if data else [])


def _stored(spark: "SparkSession", o: "Opened", log: Any, data: list[Any]) -> list[Any]:
    """Write the vectors `data` (DeletionVectorData, each merged with its file's vector if it has
    one) into one new file of the table (`log`: its DeltaLog); their DeletionVectorResults.

    What Delta's mapper (DeletionVectorWriter.createMapperToStoreDeletionVectors) does for one
    bin of vectors, on the driver, without the broadcast of the Hadoop configuration each mapper
    makes for its Spark tasks (~35 ms a batch, most of a small batch's time). The vector store
    is made once per session from the session's Hadoop configuration, which is what a table's
    log uses where opened by path with no options (as pgcdc opens them); only files on the local
    file system come here (local_paths)."""
    writing = cls(spark, "org.apache.spark.sql.delta.commands.DeletionVectorWriter")
    store = kept(spark, "deletion vector store", lambda: getattr(  # (a trait's companion: no static forwarder)
        cls(spark, "org.apache.spark.sql.delta.storage.dv.DeletionVectorStore$"), "MODULE$").createInstance(
        log.newDeltaHadoopConf()))
    table = log.dataPath()
    utils = cls(spark, "org.apache.spark.sql.delta.util.Utils")
    prefix = utils.getRandomPrefix(utils.getRandomPrefixLength(o.txn.metadata()))
    made = writing.createWriter(store, store.pathWithFileSystem(table), prefix)
    writer = made._1()
    context = cls(spark, "org.apache.spark.sql.delta.commands.DeletionVectorWriter$DeletionVectorMapperContext")(
        store, writer, table, made._2(), prefix)
    try:
        return [writing.storeBitmapAndGenerateResult(context, d) for d in data]
    finally:
        writer.close()
