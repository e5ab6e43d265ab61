"""A small batch on a two-column-key table against the same on a one-column-key table,
measured side by side in one run (not a test; never fails on timing).

    python -m bench.keys [--rows 5000] [--rounds 7]

On a throwaway PostgreSQL and local Spark (started once; JVM start excluded) it makes a
link table keyed by (actor_id int, film_id int) and a table keyed by id int with the same
rows, syncs both, then per round applies to each the same change (delete 5 rows, insert 2)
and times one ingest run of that table alone (the order alternates each round; one untimed
warm-up round first). Each table is timed with the fast engine as `auto` runs it (the
driver finds and writes the rows) and, as the reference, with the batch left to Spark
(`ingest.driver_keys = 0`: a Spark join finds the old rows). Medians are printed.
"""

from __future__ import annotations

import argparse
import time
from statistics import median

import psycopg

from bench.common import throwaway
from pgcdc.settings import Settings
from pgcdc.source import capture
from pgcdc.spark.session import get_session
from pgcdc.sync.ingest import Job
from pgcdc.sync.runs import run_job

TABLES = {"link": "create table link (actor_id int, film_id int, note text, primary key (actor_id, film_id))",
          "single": "create table single (id int primary key, actor_id int, film_id int, note text)"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    with throwaway("keys") as (pg, work):
        dsn = pg.dsn()
        spark = get_session()
        with psycopg.connect(dsn, autocommit=True) as conn:
            capture.install(conn)
            for name, ddl in TABLES.items():
                conn.execute(ddl)
            conn.execute("insert into link select i %% 200, i / 200, 'x' from generate_series(0, %s) i",
                         (args.rows - 1,))
            conn.execute("insert into single select i, i %% 200, i / 200, 'x' from generate_series(0, %s) i",
                         (args.rows - 1,))
            for name in TABLES:
                capture.attach(conn, name)
        contenders = [(table, label, driver_keys) for table in TABLES
                      for label, driver_keys in (("driver (auto)", 2_000_000), ("Spark join", 0))]
        jobs = {(t, label): Job(Settings(source={"dsn": dsn}, target={"root": str(work / f"lake{i}")},
                                         consumer=f"c{i}", tables=[f"public.{t}"],
                                         ingest={"driver_keys": dk, "recopy_fraction": 0}), spark)
                for i, (t, label, dk) in enumerate(contenders)}
        for job in jobs.values():
            run_job(job)  # the first copies
        times: dict[tuple[str, str], list[float]] = {key: [] for key in jobs}
        next_id = args.rows
        with psycopg.connect(dsn, autocommit=True) as conn:
            for round_ in range(args.rounds + 1):
                for table in TABLES:  # the same change to both tables
                    lo = round_ * 5
                    if table == "link":
                        conn.execute("delete from link where (actor_id, film_id) in "
                                     "(select actor_id, film_id from link order by film_id, actor_id "
                                     "offset %s limit 5)", (lo,))
                        conn.execute("insert into link values (%s, 1000000, 'new'), (%s, 1000001, 'new')",
                                     (round_, round_))
                    else:
                        conn.execute("delete from single where id in (select id from single order by id offset %s "
                                     "limit 5)", (lo,))
                        conn.execute("insert into single values (%s, 0, 0, 'new'), (%s, 0, 0, 'new')",
                                     (next_id, next_id + 1))
                        next_id += 2
                order = list(jobs) if round_ % 2 else list(reversed(list(jobs)))
                for key in order:
                    began = time.perf_counter()
                    run_job(jobs[key])
                    if round_ > 0:  # (round 0: the warm-up)
                        times[key].append(time.perf_counter() - began)
        print(f"\nsmall batch (delete 5, insert 2) on a {args.rows}-row table, median of {args.rounds} runs:")
        for (table, label), ts in times.items():
            key = "(actor_id, film_id)" if table == "link" else "id"
            print(f"  {table:7s} key {key:20s} {label:14s} {median(ts):6.2f} s  (min {min(ts):.2f}, max {max(ts):.2f})")
        link, single = median(times[("link", "driver (auto)")]), median(times[("single", "driver (auto)")])
        print(f"two-column / one-column key, driver path: {link / single:.2f}x")
        spark.stop()


if __name__ == "__main__":
    main()
