"""Column changes landing in place, against an ordinary batch and a copy, in one run (not a
test; never fails on timing).

    python -m bench.columns [--rows 5000000] [--writes 1000]

On a throwaway PostgreSQL and local Spark: a table of --rows rows synced once (the fast engine,
local Delta), a column added and dropped again (untimed: the code paths' first use). Then, one
after another, each change below followed by --writes updated rows, and the run that lands
both timed (the run alone: PostgreSQL's own DDL time is not pgcdc's);
beside them the same writes without a change (an ordinary batch) and a full copy of the
table in chunks (a resync). For each, the rows PostgreSQL read from the table in that run
(pg_stat_user_tables: seq_tup_read + idx_tup_fetch; the batch reads its --writes rows by key,
a copy reads them all).
"""

from __future__ import annotations

import argparse

import psycopg

from bench.common import local_job, throwaway, timed_run
from pgcdc.source import capture
from pgcdc.sync.runs import run_job

CHANGES = [
    ("ADD COLUMN, no default", "alter table t add column note text"),
    ("ADD COLUMN with a constant default", "alter table t add column flag int not null default 7"),
    ("DROP COLUMN", "alter table t drop column s"),
    ("RENAME COLUMN", "alter table t rename column v to label"),
    ("numeric(10,2) -> numeric(14,2) (no rewrite)", "alter table t alter column n type numeric(14,2)"),
    ("int -> bigint (PostgreSQL rewrites the table)", "alter table t alter column label type bigint"),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=5_000_000)
    ap.add_argument("--writes", type=int, default=1000, help="rows updated after each change")
    args = ap.parse_args()
    with throwaway("columns", settings={"shared_buffers": "1GB", "max_wal_size": "8GB"}) as (pg, work):
        with psycopg.connect(pg.dsn(), autocommit=True) as conn:
            capture.install(conn)
            print(f"loading {args.rows} rows ...", flush=True)
            conn.execute("create table t (id bigint primary key, v int not null, s text, n numeric(10,2))")
            conn.execute(f"insert into t select i, i % 1000, md5(i::text), (i % 100000) / 100.0 "
                         f"from generate_series(1, {args.rows}) i")
            conn.execute("vacuum analyze t")
            capture.attach(conn, "t")
            job = local_job(pg.dsn(), work)
            run_job(job)
            # (untimed: a rewrite's code paths, used the first time, load and compile)
            conn.execute("alter table t add column warm int default 1")
            run_job(job)
            conn.execute("alter table t drop column warm")
            run_job(job)
            step = [0]

            def writes() -> None:
                step[0] += 1
                every = max(1, args.rows // args.writes)
                conn.execute(f"update t set n = n + 1 where id in (select generate_series({step[0]}, {args.rows}, {every}))")

            def timed(label: str, ddl: str | None, copy: bool = False) -> tuple[str, float, int]:
                if ddl:
                    conn.execute(ddl)
                writes()
                return timed_run(conn, job, "t", label, None, "public.t" if copy else None)

            print("\nan ordinary batch, then each change (with the batch), then a copy in chunks", flush=True)
            results = [timed("an ordinary batch (no change)", None)]
            results += [timed(label, ddl) for label, ddl in CHANGES]
            results.append(timed("a copy of the table in chunks (resync)", None, copy=True))
        batch, copy = results[0][1], results[-1][1]
        print(f"\nresults ({args.rows:,} rows; the run that lands the change and the batch after it):")
        for label, seconds, read in results[1:-1]:
            print(f"  {label:50s} {seconds - batch:+7.2f}s over a batch, {seconds / copy:5.2f}x a copy, "
                  f"{read:,} rows read")


if __name__ == "__main__":
    main()
