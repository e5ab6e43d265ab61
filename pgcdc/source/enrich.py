"""Enrichment: read the rows of a batch's keys from PostgreSQL through Spark JDBC, as of the
pass's snapshot (a cut: every reading connection imports it, source/snapshots.py) or as they are.

The rows never pass through the driver but for small batches (fetch_rows): one JDBC read
per batch, in parallel shares, each running one query that takes the batch's queue
rows (Batch.filter_sql), unnests and decodes their keys, keeps its hash share of them
and joins them to the table. The keys alone may come to the driver (fetch_keys).
Each key comes with its current row (every Delta row with that key is replaced by
it); a key without one (or whose row no longer matches the attach predicate) is a
delete. Each column travels in the form pgcdc.source.columns gives it (docs/types.md).
"""

from __future__ import annotations

import re
from contextlib import nullcontext
from typing import TYPE_CHECKING

import psycopg
from psycopg import sql

from pgcdc.source.capture import AttachedTable
from pgcdc.source.columns import Column, unchanged
from pgcdc.source.db import reader_statements
from pgcdc.source.events import Batch
from pgcdc.source.snapshots import Held, import_statements, reading

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType


def _ident(name: str) -> str:
    return sql.Identifier(name).as_string(None)


def _row_key(alias: str, keys: list[str]) -> str:
    """SQL naming a row of `alias` by its key, for errors."""
    refs = [f"{alias}.{_ident(k)}" for k in keys]
    return refs[0] if len(refs) == 1 else f"row({', '.join(refs)})"


def select_list(columns: list[Column], alias: str, t: AttachedTable) -> str:
    """Every column (of table alias `alias`) in its travelling form; key columns in the key form."""
    row = _row_key(alias, t.key_columns)
    return ", ".join(f"{c.select(alias + '.' + _ident(c.name), c.name in t.key_columns, t.name, row)} "
                     f"as {_ident(c.name)}" for c in columns)


def restored(frame: "DataFrame", columns: list[Column], key_columns: list[str]) -> "DataFrame":
    """A JDBC read of this module's queries with every column in its Delta type (Column.spark)."""
    by_name = {c.name: c for c in columns}
    exprs = []
    for name in frame.columns:
        if name == TXID:
            exprs.append(f"`{TXID}`")
            continue
        key = name.startswith(KEY_PREFIX)
        column = by_name[name[len(KEY_PREFIX):] if key else name]
        exprs.append(column.spark(name, key or name in key_columns))
    return frame.selectExpr(*exprs)


def _decode_key(t: AttachedTable, key: str) -> list[str]:
    """SQL expressions that turn the queue's text key `key` back into typed key columns."""
    if len(t.key_columns) == 1:
        return [f"({key})::{t.key_types[0]}"]
    return [f"(({key})::text[])[{i + 1}]::{typ}" for i, typ in enumerate(t.key_types)]


def queue_key_sql(key_columns: list[str], alias: str) -> str:
    """SQL giving a row's key (columns of `alias`) in the queue's text form, as capture writes it
    (sql/functions/key_expr.sql): the value's text, or a text[] of them for a composite key."""
    texts = [f"pg_catalog.format('%s', {alias}.{_ident(c)})" for c in key_columns]
    return texts[0] if len(texts) == 1 else f"pg_catalog.format('%s', array[{', '.join(texts)}])"


def decoded_keys(t: AttachedTable, key: str = "u.k") -> str:
    """A select list turning the queue's text key `key` into the table's typed key columns, each
    under its column's name."""
    return ", ".join(f"{expr} as {_ident(k)}" for expr, k in zip(_decode_key(t, key), t.key_columns))


KEY_PREFIX = "__pgcdc_key_"  # the batch's keys, beside the row columns (null when the row is gone)
TXID = "__pgcdc_batch_txid"  # with `txids`: the greatest txid of the batch's events of each key
INTEGER_KEYS = ("smallint", "integer", "bigint")  # key_types (format_type) of integer keys


def _batch_keys(t: AttachedTable, batch: Batch, txids: bool = False) -> str:
    """A subquery `k` with the batch's distinct keys (typed key columns); with `txids`, each
    with the greatest txid of its events (TXID)."""
    refs = [_ident(k) for k in t.key_columns]
    decoded = decoded_keys(t)
    # Sorted: the join then looks the rows up in key order, near one another in the index
    # (and, for rows inserted in key order, in the heap): 45% less PostgreSQL time for a
    # share of 250k keys than in the hash order of a plain DISTINCT (measured).
    order = ", ".join(str(i + 1) for i in range(len(refs)))
    source = f"from pgcdc.commit_queue q cross join lateral unnest(q.keys) u(k) where {batch.filter_sql('q')}"
    if txids:
        return (f"(select {decoded}, max(q.txid::text::int8) as {_ident(TXID)} {source} group by {order} "
                f"order by {order}) k")
    return f"(select distinct {decoded} {source} order by {order}) k"


def batch_query(t: AttachedTable, columns: list[Column], batch: Batch, txids: bool = False) -> str:
    """The SQL reading the batch's keys (KEY_PREFIX columns, in the form the Delta table holds
    them), each with its current row: all row columns null when the row is gone (or no
    longer matches the attach predicate), which makes the key a delete. With `txids`, each key
    also with the greatest txid of its events (TXID, for pgcdc's metadata columns)."""
    row = _row_key("k", t.key_columns)
    keys = ", ".join(f"{c.select('k.' + _ident(c.name), True, t.name, row)} as {_ident(KEY_PREFIX + c.name)}"
                     for c in columns if c.name in t.key_columns)
    if txids:
        keys += f", k.{_ident(TXID)}"
    join = " and ".join(f"t.{r} = k.{r}" for r in (_ident(k) for k in t.key_columns))
    # (the columns' guard in the top WHERE: evaluated once a query, not once a key as it would
    # be inside the joined side)
    return (f"select {keys}, {select_list(columns, 't', t)} "
            f"from {_batch_keys(t, batch, txids)} left join {_source(t, columns)} t on {join} "
            f"where {unchanged(t.table_id, columns)}")


def _source(t: AttachedTable, columns: list[Column]) -> str:
    """The table as a FROM item: with a predicate, the subquery of its matching rows, so the
    predicate's column names refer to the table alone whatever else the query joins. It names
    the columns the sync reads (never `*`: a reader granted some columns may read no others)."""
    if not t.predicate:
        return t.name
    return f"(select {', '.join(_ident(c.name) for c in columns)} from {t.name} where ({t.predicate}))"


def shares(t: AttachedTable, partitions: int) -> list[str]:
    """One filter per JDBC partition over batch_query's key columns: every key in exactly one.

    Cut by the hash of the key as the Delta table holds it (numeric keys stored as text
    lose trailing zeros first), so equal keys queued in different text forms (1.0, 1.00),
    which `distinct` already made one, land in one share. PostgreSQL pushes the filter
    down to the queue scan: each partition decodes and looks up only its share."""
    n = int(partitions)
    refs = ", ".join(_ident(KEY_PREFIX + k) for k in t.key_columns)
    # an integer key hashes as one int8: for 1M keys ~65 ms less a share than hash_record (measured)
    hashed = f"hashint8({refs}::int8)" if len(t.key_columns) == 1 and t.key_types[0] in INTEGER_KEYS \
        else f"hash_record(row({refs}))"
    return [f"(({hashed} % {n}) + {n}) % {n} = {p}" for p in range(n)]


def copy_query(t: AttachedTable, columns: list[Column], lo_page: int, hi_page: int | None) -> str:
    """The SQL reading the table's rows in pages [lo_page, hi_page) (open-ended if None): a TID range scan."""
    where = [f"src.ctid >= '({int(lo_page)},0)'::tid", unchanged(t.table_id, columns)]
    if hi_page is not None:
        where.append(f"src.ctid < '({int(hi_page)},0)'::tid")
    if t.predicate:
        where.append(f"({t.predicate})")
    return f"select {select_list(columns, 'src', t)} from {t.name} src where {' and '.join(where)}"


def jdbc_props(jdbc: dict[str, str], *init: str) -> tuple[str, dict[str, str]]:
    """The JDBC URL and the reader's properties. Each connection first sets the reading session's
    settings (db.READER_SETTINGS; as statements, since the driver's own startup parameters would
    win over `options`), then runs `init`."""
    props = dict(jdbc) | {"fetchsize": "10000", "preferTimestampNTZ": "true"}
    props["sessionInitStatement"] = "; ".join([reader_statements(), *init])
    return props.pop("url"), props


def read_queries(spark: "SparkSession", jdbc: dict[str, str], t: AttachedTable, columns: list[Column], queries: list[str],
          snapshot: str | None = None) -> "DataFrame":
    """Union of one single-partition JDBC read per query: each query is read by its own task,
    with its own connection. Used for copies, whose page-range filter (ctid) has to sit
    inside the query; a batch is read as one relation cut by `predicates` (source/batch_read.py).

    With `snapshot` (from pg_export_snapshot()), every connection reads in that one snapshot.
    """
    # (no idle_in_transaction_session_timeout may end the exporting transaction's snapshot
    # while Spark copies: the exporting session sets it off too, see sync/copies.py). The
    # driver has begun the transaction already (Spark's PostgreSQL dialect turns autocommit
    # off to fetch in batches), so this sets its isolation: a BEGIN here would leave a
    # "there is already a transaction in progress" warning in the server's log per connection
    url, props = jdbc_props(jdbc, *([] if snapshot is None else import_statements(snapshot)))
    frames = [spark.read.jdbc(url, f"({q}) pgcdc_q", properties=props) for q in queries]
    df = frames[0]
    for other in frames[1:]:
        df = df.unionByName(other)
    return restored(df, columns, t.key_columns)


def key_bounds(conn: psycopg.Connection, t: AttachedTable, batch: Batch) -> tuple[int, int] | None:
    """Lowest and highest key of the batch for a one-column integer key, else None.

    Read from the queue in PostgreSQL (no Spark job); the apply step uses them so Delta can
    skip files whose key range lies outside the batch (changes to recent rows).
    """
    if len(t.key_columns) != 1 or t.key_types[0] not in INTEGER_KEYS:
        return None
    lo, hi = conn.execute(f"select min(u.k::bigint), max(u.k::bigint) from pgcdc.commit_queue q "
                          f"cross join lateral unnest(q.keys) u(k) where {batch.filter_sql('q')}").fetchone()
    return None if lo is None else (int(lo), int(hi))


def array_bounds(keys: "pa.Table") -> tuple[int, int] | None:
    """The lowest and highest value of the first key column, if it is an integer one, of keys
    already read into the driver (fetch_keys): the files whose range of that column misses
    them hold none of the keys (key_bounds, for a one-column key, gives the same)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    first = keys.column(0)
    if not pa.types.is_integer(first.type) or len(first) == 0:
        return None
    low, high = pc.min_max(first).values()
    return int(low.as_py()), int(high.as_py())


def batch_partitions(keys: int, small_batch_keys: int, partitions: int, slots: int) -> int:
    """How many shares to read a batch of `keys` queued keys in: one per `small_batch_keys`,
    at least 1, at most `partitions`, and no more than Spark runs at once (`slots`). Each
    share costs a task, a connection and a new file, and unnests and hashes every queued
    key of the batch to find its own (for 1M keys ~0.2 s of PostgreSQL each): shares
    beyond what runs in parallel only add that work."""
    return max(1, min(partitions, slots, -(-keys // small_batch_keys)))


DRIVER_KEY_TYPES = {"int2", "int4", "int8", "text", "varchar"}


def keys_fit_driver(t: AttachedTable, columns: list[Column]) -> bool:
    """True for a key whose every column Delta holds as integers or text (text, varchar, and
    the types read in text form, such as uuid): the ones driver_marks matches exactly."""
    by_name = {c.name: c for c in columns}
    return all(not by_name[k].is_array and (by_name[k].base in DRIVER_KEY_TYPES or by_name[k].form(key=True) == "text")
               for k in t.key_columns)


DRIVER_ROWS_BYTES = 64 * 1024 * 1024  # a batch's rows read into the driver: at most about this much (estimated)


def fetch_keys(conn: psycopg.Connection, t: AttachedTable, columns: list[Column], batch: Batch) -> "pa.Table":
    """The batch's distinct keys (one column per key column, in the form the Delta table
    holds them), read into the driver (driver_marks; at most `ingest.driver_keys` queued
    keys). PostgreSQL decodes them and pyarrow drops the repeats: for 1M one-column keys
    ~0.35 s, where PostgreSQL's DISTINCT alone took 0.6 s (measured)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    by_name = {c.name: c for c in columns}
    keys = [by_name[k] for k in t.key_columns]
    forms = [k.select(expr, True, t.name, "u.k") for k, expr in zip(keys, _decode_key(t, "u.k"))]
    with conn.cursor(binary=True) as cur:  # one array value a column: no per-row work in Python
        values = cur.execute(f"select {', '.join(f'array_agg({f})' for f in forms)} from pgcdc.commit_queue q "
                             f"cross join lateral unnest(q.keys) u(k) where {batch.filter_sql('q')}").fetchone()
    assert values is not None  # (an aggregate's one row)
    kinds = [pa.int64() if k.base in ("int2", "int4", "int8") and not k.is_array else pa.string() for k in keys]
    if len(keys) == 1:
        return pa.table({keys[0].name: pc.unique(pa.array(values[0] or [], type=kinds[0]))})
    table = pa.table({k.name: pa.array(v or [], type=kind) for k, v, kind in zip(keys, values, kinds)})
    return table.group_by([k.name for k in keys]).aggregate([]).select([k.name for k in keys])


def fetch_rows(conn: psycopg.Connection, t: AttachedTable, columns: list[Column], keys: "pa.Table",
               snapshot: Held | None = None) -> list[tuple[object, ...]] | None:
    """The live rows (values in column order) of `keys` (from fetch_keys), read into the
    driver (driver_write), as of the pass's `snapshot` if given (a transaction of their own);
    each row once, and only rows of these keys, so the batch never adds a row whose old version
    it did not mark deleted. None where psycopg has no Python value for one: Spark reads them."""
    def text(part: str) -> str:  # names may hold "%", which the query's parameters make special
        return part.replace("%", "%%")
    refs = [_ident(k) for k in t.key_columns]
    # the keys come back in the table's types the way the queue's keys are decoded
    typed = ", ".join(f"(k.{r})::{typ}" for r, typ in zip(refs, t.key_types))
    unnest = ", ".join(["%s::text[]"] * len(refs))
    if len(refs) == 1:
        where = text(f"t.{refs[0]} = any(array(select {typed} from unnest(") + unnest + text(f") k({refs[0]})))")
    else:
        where = (text(f"({', '.join('t.' + r for r in refs)}) in (select {typed} from unnest(") + unnest
                 + text(f") k({', '.join(refs)}))"))
    query = text(f"select {select_list(columns, 't', t)} from {_source(t, columns)} t "
                 f"where {unchanged(t.table_id, columns)} and ") + where
    try:
        with nullcontext() if snapshot is None else reading(conn, snapshot):
            return conn.execute(query, [keys.column(k).cast("string").to_pylist() for k in t.key_columns]).fetchall()
    except psycopg.DataError:
        return None


def fetch_table(conn: psycopg.Connection, t: AttachedTable, columns: list[Column]) -> list[tuple[object, ...]] | None:
    """Every row of the table (its predicate's), read into the driver in the connection's open
    transaction, the copy's snapshot (driver_copy); None where psycopg has no Python value for
    one: Spark reads them. (In a savepoint: a refused value leaves the snapshot usable.)"""
    try:
        with conn.transaction():
            return conn.execute(copy_query(t, columns, 0, None)).fetchall()
    except psycopg.DataError:
        return None


REPLAY_WAIT_SECONDS = 60


def replayed_at_least(lsn: str, seconds: float = REPLAY_WAIT_SECONDS) -> str:
    """SQL a reading connection runs first: on a standby, wait until it has replayed the WAL up
    to `lsn` (where the batch was planned), failing clearly after `seconds`. Another standby
    behind a load balancer may be behind the one the batch was planned on; rows read there
    could be older than the batch's events. A primary has every change: no wait."""
    if not re.fullmatch(r"[0-9A-F]{1,8}/[0-9A-F]{1,8}", lsn):
        raise ValueError(f"not a WAL position: {lsn!r}")
    steps = max(1, int(seconds / 0.05))
    return (f"DO $pgcdc$ BEGIN FOR i IN 1..{steps} LOOP "
            f"EXIT WHEN NOT pg_catalog.pg_is_in_recovery() OR pg_catalog.pg_last_wal_replay_lsn() >= '{lsn}'; "
            f"PERFORM pg_catalog.pg_sleep(0.05); END LOOP; "
            f"IF pg_catalog.pg_is_in_recovery() AND pg_catalog.pg_last_wal_replay_lsn() < '{lsn}' THEN "
            f"RAISE EXCEPTION 'pgcdc: this standby replayed only up to %, the batch was planned at {lsn}; it is "
            f"more than {seconds:.0f} s behind: point source.replica_dsn at one standby, or fix its replication', "
            f"pg_catalog.pg_last_wal_replay_lsn(); END IF; END $pgcdc$")


def read_table(spark: "SparkSession", jdbc: dict[str, str], t: AttachedTable, columns: list[Column],
               partitions: int, relpages: int, snapshot: str | None = None) -> "DataFrame":
    """Every row of the table, read as `partitions` page (ctid) ranges.

    Pass the exported `snapshot` whenever partitions > 1: an UPDATE committed between two
    partitions' reads can move a row from a page range not read yet to one already read
    (the row would be missed) or the other way round (it would be copied twice). In one
    snapshot every row is read exactly once. The last range is open-ended.
    (Seven parameters: a batch read's four, the pages to cut into ranges, and the snapshot.)
    """
    step = max(1, -(-max(relpages, 1) // partitions))
    return read_queries(spark, jdbc, t, columns, [copy_query(t, columns, p * step, (p + 1) * step if p + 1 < partitions
                                                             else None) for p in range(partitions)], snapshot)


def schema_of(spark: "SparkSession", jdbc: dict[str, str], t: AttachedTable, columns: list[Column]) -> "StructType":
    """The table's Spark schema as the sync reads it (to create the Delta table)."""
    query = f"select {select_list(columns, 'src', t)} from {t.name} src where false"
    return read_queries(spark, jdbc, t, columns, [query]).schema
