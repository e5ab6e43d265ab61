"""Partitioned tables: a root's size as its leaves hold it, and whether capture still covers its tree.

A partitioned table is attached whole: capture triggers sit on every table of its tree
(sql/functions/generate_capture.sql) and pgcdc.attached.members keeps the tree they were
made for. The pgcdc_ddl and pgcdc_drop event triggers make capture follow the tree in the
DDL's own transaction. Where no event trigger exists (an install without superuser rights), a
partition created or attached later has no triggers: `gaps` names it, each run copies
the table rather than sync it short, and `pgcdc status` asks for `pgcdc attach ROOT`.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

# The leaves hold a partitioned table's rows: its own pg_class row has none. For a plain table
# pg_partition_tree is empty, and the table's own row counts.
_SIZE = """
select greatest(coalesce(max(c.relpages), 0), 1)::bigint, coalesce(sum(c.relpages), 0)::bigint,
       coalesce(sum(pg_table_size(c.oid)), 0)::bigint,
       coalesce(sum(greatest(c.reltuples, 0)), 0)::float8, bool_and(c.reltuples < 0)
  from pg_class c
 where c.oid in (select p.relid from pg_partition_tree(%(t)s::regclass) p where p.isleaf)
    or (c.oid = %(t)s::regclass and c.relkind <> 'p')
"""

_NAME = ("(select format('%%I.%%I', n.nspname, r.relname) from pg_class r "
         "join pg_namespace n on n.oid = r.relnamespace where r.oid = {})")
_GAP = f"""
select a.table_id, c.relispartition, {_NAME.format("pg_partition_root(c.oid)")},
       array(select {_NAME.format("p.relid")} from pg_partition_tree(a.relid) p
              where p.level > 0 and not p.relid::oid = any(coalesce(a.members, '{{}}')) order by 1),
       (select count(*) from unnest(a.members) m
         where not exists (select 1 from pg_partition_tree(a.relid) p where p.relid::oid = m))
  from pgcdc.attached a join pg_class c on c.oid = a.relid
 where a.table_id = any(%s) and (c.relispartition or c.relkind = 'p')
"""


@dataclass(frozen=True)
class Size:
    """pg_class's figures for a table's rows: summed over the leaves of a partitioned one."""

    pages: int  # the largest leaf's pages, at least 1: a copy's page (ctid) ranges cut every leaf
    total_pages: int
    bytes: int
    rows: float  # -1 before the first ANALYZE of any leaf (pg_class.reltuples' convention)


def size(conn: psycopg.Connection, table: str) -> Size:
    pages, total, nbytes, rows, unknown = conn.execute(_SIZE, {"t": table}).fetchone()
    return Size(int(pages), int(total), int(nbytes), -1.0 if unknown else float(rows))


def gaps(conn: psycopg.Connection, tables: dict[int, str]) -> dict[int, str]:
    """For each table (table_id: name) whose capture no longer covers every statement that changes
    its rows, why: a partition of its tree without capture triggers (created or attached where
    no event trigger saw it), one gone from it (its rows left without row events), or the table
    made a partition of another (statements aimed at that one fire only that one's triggers).
    One query for all of them; a plain table costs nothing."""
    found = {}
    for table_id, is_partition, root, uncaptured, gone in conn.execute(_GAP, (list(tables),)).fetchall():
        name = tables[table_id]
        if is_partition:
            found[table_id] = (f"{name} is now a partition of {root}: statements aimed at {root} are not captured; "
                               f"detach {name} and attach {root} instead")
        elif uncaptured or gone:
            changed = []
            if uncaptured:
                more = f" and {len(uncaptured) - 5} more" if len(uncaptured) > 5 else ""
                changed.append(f"{', '.join(uncaptured[:5])}{more} not captured")
            if gone:
                changed.append(f"{gone} partition(s) detached or dropped")
            found[table_id] = (f"its partitions changed where no event trigger saw it ({'; '.join(changed)}): run "
                               f"`pgcdc attach {name}` so capture follows them")
    return found
