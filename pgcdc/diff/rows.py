"""Delta against PostgreSQL, row by row, independently of the sync.

Both sides are brought to one canonical text per value by code of this package's own, not
by the sync's reading (pgcdc/source/columns.py): PostgreSQL's side by SQL from each value, keyed by
its PostgreSQL type and following docs/types.md; Delta's side by Spark SQL, keyed by the
Delta type (diff/canon.py). A mapping that changed values on the way (a date moved, an infinity
turned into a plausible date) shows as a difference. Rows are hashed into buckets by key on both
sides; only the buckets whose row count or hash differ are compared row by row.

With a consumer's state, exact while the application writes: PostgreSQL is read in one snapshot
taken after the Delta version compared, and a row that differs by a change the consumer has not
applied yet is counted apart, as on its way (diff/in_flight.py says why that is sound).
Without one, exact only when nothing is written meanwhile.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
import hashlib
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql

from pgcdc.diff import canon
from pgcdc.diff.in_flight import columns_checked, on_their_way
from pgcdc.errors import first_line
from pgcdc.lake import history, history_versions, landing, shards, tablelog, target
from pgcdc.lake.paths import spark_ident
from pgcdc.source import access
from pgcdc.source.capture import AttachedTable
from pgcdc.source.columns import REWRITE_TRIES
from pgcdc.watermark import ConsumerState

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

ROWS_PER_BUCKET = 1000
MAX_BUCKETS = 65536


@dataclass(frozen=True)
class Comparison:
    """Row counts on both sides and the rows only one side has (a row that differs counts on
    both; a row Delta holds more than once counts its extra copies as `duplicates`), or why the
    two could not be compared (`problem`); and what to do about it (`next_step`)."""

    table: str
    path: str
    postgres_rows: int
    delta_rows: int
    only_in_postgres: int
    only_in_delta: int
    examples: list[str] = field(default_factory=list)  # keys of rows that differ
    columns: str | None = None  # how the column sets differ, if they do
    duplicates: int = 0
    problem: str | None = None
    next_step: str = ""
    in_flight: int = 0  # rows that differ by changes the consumer has not applied yet (not counted above)
    differing: list[str] = field(default_factory=list)  # the keys of the rows that differ (checks/repair.py)
    ranges: "Ranges | None" = None  # the key ranges whose rows differ, to compare again alone (None: too many)
    within: int = 0  # only this many key ranges were compared (0: the whole table)
    version: int = -1  # the Delta version compared

    @property
    def equal(self) -> bool:
        return self.columns is None and self.problem is None and \
            self.only_in_postgres == self.only_in_delta == self.duplicates == 0

    def line(self) -> str:
        moving = f"; {self.in_flight} rows differ by changes not synced yet" if self.in_flight else ""
        if self.equal and self.within:
            return (f"{self.table}: Delta equals PostgreSQL in the {self.within} key ranges compared ({self.delta_rows} "
                    f"rows{moving})")
        if self.equal:
            return f"{self.table}: Delta equals PostgreSQL ({self.delta_rows} rows{moving})"
        if self.problem is not None:
            what = f"{self.table}: NOT COMPARED: {self.problem}"
        elif self.columns is not None:
            what = f"{self.table}: DIFFERENT: {self.columns}"
        else:
            what = (f"{self.table}: DIFFERENT: {self.only_in_postgres} rows only in PostgreSQL, {self.only_in_delta} "
                    f"only in Delta, {self.duplicates} more than once in Delta ({self.postgres_rows} vs "
                    f"{self.delta_rows} rows; keys e.g. {', '.join(self.examples)}{moving})")
        return f"{what}; {self.next_step}" if self.next_step else what


@dataclass(frozen=True)
class Buckets:
    """How rows are grouped by key on both sides. A one-column integer key: key ranges, which
    both sides can read alone when comparing rows (PostgreSQL by its index, Delta skipping
    files by their statistics). Any other key: a hash of its canonical text."""

    pg: str                 # SQL (over table alias s): a row's bucket
    spark: str              # Spark SQL: the same
    key: str | None = None  # the integer key column (ranges), else None (hash)
    low: int = 0
    width: int = 1
    fits: str = ""          # a digest of the key's canonical texts on both sides these were made for
    count: int = 0          # buckets the rows fell into when these were laid out

    @staticmethod
    def of(conn: "psycopg.Connection", t: AttachedTable, key_types: list[str], pg_key: str, spark_key: str,
           rows: int) -> "Buckets":
        count = max(1, min(MAX_BUCKETS, rows // ROWS_PER_BUCKET))
        if len(t.key_columns) == 1 and key_types[0] in ("int2", "int4", "int8"):
            key = t.key_columns[0]
            low, high = conn.execute(sql.SQL("select min({k}), max({k}) from {t}").format(
                k=sql.Identifier(key), t=sql.SQL(t.name))).fetchone()
            low, high = low or 0, high or 0
            width = max(1, -(-(high - low + 1) // count))
            ref = "`" + key.replace("`", "``") + "`"
            # (in numeric/decimal: key - low overflows a bigint for keys at both of its ends)
            return Buckets(f"div(s.{sql.Identifier(key).as_string(None)}::numeric - ({low}), {width})",
                           f"floor((cast({ref} as decimal(38,0)) - ({low})) / {width})", key, low, width,
                           _fits(pg_key, spark_key), -(-(high - low + 1) // width))
        return Buckets(f"('x' || lpad(substr(md5({pg_key}), 1, 8), 16, '0'))::bit(64)::int8 % {count}",
                       f"cast(conv(substr(md5({spark_key}), 1, 8), 16, 10) as bigint) % {count}",
                       fits=_fits(pg_key, spark_key), count=count)

    def where(self, chosen: list[int], spark: bool) -> str:
        """A filter for the rows of the `chosen` buckets (PostgreSQL over alias s, or Spark)."""
        if self.key is None:
            listed = ", ".join(str(b) for b in chosen)
            return f"{self.spark} in ({listed})" if spark else f"{self.pg} in ({listed})"
        ref = "`" + self.key.replace("`", "``") + "`" if spark else f"s.{sql.Identifier(self.key).as_string(None)}"
        return " or ".join(f"({ref} >= ({self.low + b * self.width}) and {ref} < ({self.low + (b + 1) * self.width}))"
                           for b in chosen)


def _fits(pg_key: str, spark_key: str) -> str:
    return hashlib.md5(f"{pg_key}\n{spark_key}".encode()).hexdigest()


MAX_RANGES = 1000  # differing key ranges a comparison keeps, to compare again alone


@dataclass(frozen=True)
class Ranges:
    """Key ranges (buckets) to compare alone: those a comparison found differing, and how rows
    fall into them. Repair compares again only these after verify found them (lake/verified.py),
    and after it rewrote their rows."""

    buckets: Buckets
    chosen: tuple[int, ...]
    renew: bool = False  # where `buckets` no longer fit the table's key: the same ranges laid out anew (else all)

    def encode(self) -> dict[str, Any]:
        return {"buckets": asdict(self.buckets), "chosen": list(self.chosen)}

    @staticmethod
    def decode(d: dict[str, Any]) -> "Ranges":
        return Ranges(Buckets(**d["buckets"]), tuple(int(b) for b in d["chosen"]))


def compare(spark: "SparkSession", conn: "psycopg.Connection", t: AttachedTable, path: str,
            state: ConsumerState | None = None, only: Ranges | None = None) -> Comparison:
    """Compare the Delta table at `path` with PostgreSQL's table `t` (see the module docstring);
    a table that cannot be read, or whose columns differ, is an outcome with its own next step.
    `state`: the consumer's committed state, read before anything else (diff/in_flight.py);
    `only`: compare these key ranges alone (where they still fit the table's key), not the whole
    table. (Six parameters: the last two say what to compare and how to read a difference.)"""
    from py4j.protocol import Py4JJavaError

    access.check_readable(conn, t)
    again = f"run `pgcdc resync {t.name}` to write it again from PostgreSQL"
    if not target.is_delta(spark, path):
        return Comparison(t.name, path, 0, 0, 0, 0, problem=f"there is no Delta table at {path}",
                          next_step="run `pgcdc ingest` (its first run copies the table)")
    gone = tablelog.missing_files(spark, path)
    if gone:
        return Comparison(t.name, path, 0, 0, 0, 0, next_step=again,
                          problem=f"{path} references data files that are gone ({', '.join(gone)}, ...): no reader can "
                                  "read it")
    try:
        # (a caller's transaction already open on `conn` is read in as it is, with its own isolation)
        opened = conn.autocommit or conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        for _ in range(REWRITE_TRIES if opened else 1):
            version = tablelog.latest_version(spark, path)  # (after the state, before PostgreSQL's snapshot)
            with conn.transaction():
                if opened:
                    conn.execute("set transaction isolation level repeatable read, read only")
                done = _compare(spark, conn, t, path, version, (state, only))
                rewritten = _rewritten(conn, t)
            if rewritten is None:
                return done
        return Comparison(t.name, path, 0, 0, 0, 0, problem=f"{rewritten} was rewritten (ALTER TABLE, TRUNCATE, "
                          "VACUUM FULL) while it was read: a snapshot older than a rewrite may see no rows",
                          next_step="run verify again")
    except Py4JJavaError as exc:
        return Comparison(t.name, path, 0, 0, 0, 0, problem=f"Spark cannot read {path}: {first_line(exc)}",
                          next_step=f"if no other reader can either, {again}")


def _rewritten(conn: "psycopg.Connection", t: AttachedTable) -> str | None:
    """The table (or partition) rewritten since the open transaction's snapshot, or None: as of
    the snapshot pg_class names its old file, the catalog as it is now the new one (as
    pgcdc._columns_are checks for the sync's reads)."""
    row = conn.execute("select min(c.relname) from pg_catalog.pg_class c where (c.oid = %s::regclass or c.oid in "
                       "(select relid from pg_catalog.pg_partition_tree(%s::regclass))) and c.relkind in ('r', 'm') "
                       "and c.relfilenode is distinct from pg_catalog.pg_relation_filenode(c.oid)",
                       (t.name, t.name)).fetchone()
    return None if row is None or row[0] is None else f"{t.name} ({row[0]})"


def _compare(spark: "SparkSession", conn: "psycopg.Connection", t: AttachedTable, path: str, version: int,
             asked: tuple[ConsumerState | None, Ranges | None]) -> Comparison:
    """compare's reading: Delta's rows (at `version`) shaped as PostgreSQL's, their columns
    checked, then the rows (`asked`: compare's state and ranges)."""
    state, only = asked
    pg_cols = canon.pg_columns(conn, t.name)
    names = [c[0] for c in pg_cols]
    delta = _delta_rows(spark, t, path, names, version)
    if isinstance(delta, Comparison):
        return _unless_on_their_way(conn, t, state, delta, names)
    types = {f.name: f.dataType for f in delta.schema.fields}
    differ = _columns_differ(t, path, names, list(types))
    if differ is not None:
        return _unless_on_their_way(conn, t, state, differ, names)
    rows = _Rows.of(conn, t, pg_cols, types, None if only is None else only.buckets)
    chosen = None if only is None or (only.buckets != rows.buckets and not only.renew) else only.chosen
    return replace(rows.compare(conn, delta, path, state, chosen), version=version)


def _unless_on_their_way(conn: "psycopg.Connection", t: AttachedTable, state: ConsumerState | None,
                         differ: Comparison, names: list[str]) -> Comparison:
    """`differ` (columns that differ) as the consumer's state explains it (diff/in_flight.py): a
    column change it has not reached yet (not compared: the next run brings Delta to it), or a
    Delta table whose columns another tool changed (the next run passes it by: resync). A key
    column gone (`names`: PostgreSQL's columns) is neither: no run follows it."""
    if differ.columns is None or state is None or any(k not in names for k in t.key_columns):
        return differ
    checked = columns_checked(conn, t, state)
    if checked is None:
        return differ
    if checked:
        return replace(differ, next_step=f"another tool changed the Delta table's columns after the consumer's last "
                                         f"commit: run `pgcdc resync {t.name}` to write it again from PostgreSQL")
    return replace(differ, columns=None, problem=f"its columns changed in PostgreSQL after the consumer's last "
                   f"commit ({differ.columns}): the next run brings Delta to them",
                   next_step="compare again after `pgcdc ingest`")


def _delta_rows(spark: "SparkSession", t: AttachedTable, path: str, names: list[str],
                version: int) -> "DataFrame | Comparison":
    """The Delta table's rows (at `version`) PostgreSQL should hold now, in its columns' order
    (without pgcdc's own columns, soft-deleted rows, a history's closed versions or a fan-in's
    other sources)."""
    delta = spark.read.format("delta").option("versionAsOf", version).load(path)
    if landing.DELETED in delta.columns:  # soft deletes: the rows PostgreSQL still has
        delta = delta.where(f"not {spark_ident(landing.DELETED)}")
    delta = delta.drop(*landing.NAMES)  # (pgcdc's own columns: lake/landing.py)
    if path.endswith(history.SUFFIX):  # a history's current rows (lake/history.py)
        delta = delta.where(history_versions.IS_CURRENT).drop(*history_versions.NAMES)
        if left := [c for c in delta.columns if t.leaves_out(c)]:
            return Comparison(t.name, path, 0, 0, 0, 0, columns=f"the history holds {', '.join(left)}, which "
                                                                f"{t.name} leaves out",
                              next_step="run `pgcdc ingest`: its history's next fold rewrites it without them")
        # (a column dropped in PostgreSQL stays in the history: docs/history.md)
        delta = delta.select(*[spark_ident(c) for c in delta.columns if c in names or c == shards.SHARD])
    if t.fan_in_shard is not None:  # a fan-in source's rows: its shard's, in the columns it has
        delta = delta.where(shards.where(t.fan_in_shard))
        delta = delta.select(*[spark_ident(n) for n in names if n in delta.columns],
                             *[c for c in delta.columns if c not in names and c != shards.SHARD])
    return delta


def _columns_differ(t: AttachedTable, path: str, names: list[str], delta_names: list[str]) -> Comparison | None:
    """Why rows cannot be compared column for column, if they cannot."""
    gone = [k for k in t.key_columns if k not in names]
    if gone:  # (a key renamed where no event trigger saw it: pgcdc.attached still has the old name)
        return Comparison(t.name, path, 0, 0, 0, 0, columns=f"key column {', '.join(gone)} is no longer a column of "
                                                            f"{t.name}",
                          next_step=f"run `pgcdc attach {t.name}` again (its key was renamed where no event trigger saw "
                                    "it), then `pgcdc ingest`; verify compares the rows after that")
    if names != delta_names:
        return Comparison(t.name, path, 0, 0, 0, 0, columns=f"columns differ: PostgreSQL {', '.join(names)}; "
                                                            f"Delta {', '.join(delta_names)}",
                          next_step=f"run `pgcdc ingest`: it copies the table with its columns as they are now (with "
                                    f"on_schema_change = \"fail\": `pgcdc resync {t.name}`)")
    return None


@dataclass(frozen=True)
class _Rows:
    """One table's rows on both sides as (key text, row text, bucket): the SQL and Spark SQL that
    make them, so both sides are summed per bucket and read row by row in the same terms."""

    t: AttachedTable
    pg_key: str
    pg_row: str
    spark_key: str
    spark_row: str
    buckets: Buckets

    @staticmethod
    def of(conn: "psycopg.Connection", t: AttachedTable, pg_cols: list[tuple[str, str, bool, int | None]],
           types: dict[str, Any], given: Buckets | None = None) -> "_Rows":
        """The rows' SQL, bucketed as `given` where it was made for the same key texts, else anew
        (which counts the rows)."""
        names = [c[0] for c in pg_cols]
        pg_texts = {n: canon.pg_canon(f"s.{sql.Identifier(n).as_string(None)}", base, arr, prec, n in t.key_columns)
                    for n, base, arr, prec in pg_cols}
        spark_texts = {n: canon.delta_value(spark_ident(n), types[n]) for n in names}
        pg_key = canon.pg_framed([pg_texts[k] for k in t.key_columns])
        spark_key = canon.spark_framed([spark_texts[k] for k in t.key_columns])
        if given is not None and given.fits == _fits(pg_key, spark_key):
            buckets = given
        else:
            rows = conn.execute(f"select count(*) from {t.name}").fetchone()[0]
            buckets = Buckets.of(conn, t, [next(c[1] for c in pg_cols if c[0] == k) for k in t.key_columns],
                                 pg_key, spark_key, rows)
        return _Rows(t, pg_key, canon.pg_framed([pg_texts[n] for n in names]), spark_key,
                     canon.spark_framed(list(spark_texts.values())), buckets)

    def pg(self, where: str) -> str:
        predicate = f"({self.t.predicate})" if self.t.predicate else "true"
        return (f"select {self.pg_key} k, {self.pg_row} r, {self.buckets.pg} b from {self.t.name} s "
                f"where {predicate} and ({where})")

    def spark(self, rows: "DataFrame") -> "DataFrame":
        return rows.selectExpr(f"{self.spark_key} as k", f"{self.spark_row} as r", f"{self.buckets.spark} as b")

    def compare(self, conn: "psycopg.Connection", delta: "DataFrame", path: str, state: ConsumerState | None,
                chosen: tuple[int, ...] | None = None) -> Comparison:
        """Sums per bucket on both sides, then row by row in the buckets that differ (`chosen`: in
        these alone, without sums); with the consumer's `state`, the rows that differ by changes it
        has not applied yet counted apart (diff/in_flight.py)."""
        name, names = self.t.name, list(delta.columns)
        with ThreadPoolExecutor(max_workers=1) as pool:
            if chosen is None:
                differing, pg_total, delta_total = self._sums(pool, conn, delta)
            else:
                differing, pg_total, delta_total = sorted(chosen), 0, 0
            ranges = Ranges(self.buckets, tuple(differing)) if len(differing) <= MAX_RANGES else None
            within = 0 if chosen is None else len(chosen)
            if not differing:
                return Comparison(name, path, pg_total, delta_total, 0, 0, ranges=ranges, within=within)
            pg_rows_side = pool.submit(self._read_pg, conn, differing)
            in_delta: dict[str, list[str]] = {}
            for r in self.spark(delta.where(self.buckets.where(differing, spark=True))).select("k", "r").collect():
                in_delta.setdefault(r.k, []).append(r.r)
            in_pg = pg_rows_side.result()
        if chosen is not None:  # (the rows of the ranges compared)
            pg_total, delta_total = len(in_pg), sum(len(v) for v in in_delta.values())
        only_pg = [k for k, v in in_pg.items() if v not in in_delta.get(k, [])]
        only_delta = [k for k, vs in in_delta.items() for v in vs if v != in_pg.get(k)]
        twice = [k for k, vs in in_delta.items() if k in in_pg for _ in range(vs.count(in_pg[k]) - 1)]
        differ = sorted(set(only_pg) | set(only_delta) | set(twice))
        moving = on_their_way(conn, self.t, state, self.pg_key, differ) if state is not None else set()
        only_pg, only_delta, twice = ([k for k in keys if k not in moving] for keys in (only_pg, only_delta, twice))
        examples = [_example(k, names, in_pg.get(k), in_delta.get(k, [None])[0])
                    for k in sorted(set(only_pg) | set(only_delta) | set(twice))[:3]]
        return Comparison(name, path, pg_total, delta_total, len(only_pg), len(only_delta), examples,
                          duplicates=len(twice), in_flight=len(moving),
                          differing=sorted(set(only_pg) | set(only_delta) | set(twice)), ranges=ranges, within=within)

    def _sums(self, pool: ThreadPoolExecutor, conn: "psycopg.Connection", delta: "DataFrame") -> tuple[list[int], int, int]:
        """(the buckets whose count or hash differ, PostgreSQL's rows, Delta's rows): sums per bucket
        on both sides, PostgreSQL's on the pool's thread while Spark reads Delta."""
        from pyspark.sql import functions as F

        pg_hash, sp_hash = canon.row_hash("r")
        pg_side: Future[dict[Any, tuple[Any, Any]]] = pool.submit(lambda: {b: (n, h) for b, n, h in conn.execute(
            f"select b, count(*), bit_xor({pg_hash}) from ({self.pg('true')}) x group by 1")})
        delta_sums = {r.b: (r.n, r.h) for r in self.spark(delta).groupBy("b").agg(
            F.count("*").alias("n"), F.expr(f"bit_xor({sp_hash})").alias("h")).collect()}
        pg_sums = pg_side.result()
        differing = sorted(int(b) for b in set(pg_sums) | set(delta_sums) if pg_sums.get(b) != delta_sums.get(b))
        return differing, sum(n for n, _ in pg_sums.values()), sum(n for n, _ in delta_sums.values())

    def _read_pg(self, conn: "psycopg.Connection", differing: list[int]) -> dict[str, str]:
        found: dict[str, str] = {}
        for start in range(0, len(differing), 100):
            query = self.pg(self.buckets.where(differing[start:start + 100], spark=False))
            found.update((k, r) for k, r, _ in conn.execute(query))
        return found


def framed_values(framed: str) -> list[str | None]:
    """The values _framed joined (`3:abc1:7N` -> abc, 7, None)."""
    values: list[str | None] = []
    rest = framed
    while rest:
        if rest.startswith("N"):
            values.append(None)
            rest = rest[1:]
            continue
        length, _, rest = rest.partition(":")
        values.append(rest[:int(length)])
        rest = rest[int(length):]
    return values


def _example(key: str, names: list[str], pg: str | None, delta: str | None) -> str:
    """A differing row for people: its key and its first differing column, in canonical form."""
    shown = "/".join("null" if v is None else v for v in framed_values(key))
    if pg is None or delta is None:
        return f"{shown} (only in {'Delta' if pg is None else 'PostgreSQL'})"
    column = next(((n, a, b) for n, a, b in zip(names, framed_values(pg), framed_values(delta)) if a != b), None)
    if column is None:
        return f"{shown} (more than once in Delta)"
    return f"{shown} ({column[0]}: PostgreSQL {str(column[1])[:40]} vs Delta {str(column[2])[:40]})"
