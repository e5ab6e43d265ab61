"""What each landing shape (docs/columns.md, docs/history.md) costs beside the plain mirror, measured side by side
in one run (not a test; never fails on timing).

    python -m bench.landing [--rows 2000000] [--changes 10000 1000000] [--rounds 2]

On a throwaway PostgreSQL and local Spark, two tables of --rows rows (`wide` and its copy
`wide_cols`, attached with --exclude-columns b,c: the wide text and numeric columns never read)
take the same changes each round: every k-th row updated and a tenth as many deleted. One
consumer per shape applies them, each a long-lived Job as a follower's runs are, in an order
rotated each round: the plain mirror with each engine, the column choice, soft deletes and
metadata columns with each engine, the change data feed alone (the merge engine's: its readers
expect update pre- and post-images) and the history with each engine (docs/history.md: the
change data feed, and the history's fold after each run). Each shape's time is printed against
the plain mirror's with the same engine.
"""

from __future__ import annotations

import argparse
from statistics import median

from bench.common import throwaway, timed
from pgcdc.settings import Settings
from pgcdc.source import capture
from pgcdc.spark.session import get_session
from pgcdc.sync.ingest import Job
from pgcdc.sync.runs import run_job

SHAPES = {  # name: (table, target settings, engine)
    "plain, fast": ("public.wide", {}, "fast"),
    "plain, merge": ("public.wide", {}, "merge"),
    "columns chosen, fast": ("public.wide_cols", {}, "fast"),
    "soft deletes, fast": ("public.wide", {"deletes": "soft"}, "fast"),
    "soft deletes, merge": ("public.wide", {"deletes": "soft"}, "merge"),
    "metadata columns, fast": ("public.wide", {"metadata_columns": True}, "fast"),
    "metadata columns, merge": ("public.wide", {"metadata_columns": True}, "merge"),
    "change data feed, merge": ("public.wide", {"change_data_feed": True}, "merge"),
    "history, fast": ("public.wide", {"history": True}, "fast"),
    "history, merge": ("public.wide", {"history": True}, "merge"),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--changes", type=int, nargs="+", default=[10_000, 1_000_000])
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    with throwaway("landing", settings={"shared_buffers": "1GB", "max_wal_size": "8GB"}) as (pg, work):
        import psycopg

        with psycopg.connect(pg.dsn(), autocommit=True) as conn:
            print(f"loading {args.rows} rows into wide and wide_cols ...", flush=True)
            for table in ("wide", "wide_cols"):
                conn.execute(f"create table {table} (id bigint primary key, a int not null, b text not null, "
                             "c numeric(12,2), d timestamptz not null default now())")
                conn.execute(f"insert into {table} (id, a, b, c) select i, i %% 1000, md5(i::text) || "
                             "md5((i * 7)::text), (i %% 100000) / 100.0 from generate_series(1, %s) i", (args.rows,))
                conn.execute(f"vacuum analyze {table}")
            capture.install(conn)
            capture.attach(conn, "wide")
            capture.attach(conn, "wide_cols", exclude_columns=["b", "c"])
            base = Settings(source={"dsn": pg.dsn()}, target={"root": str(work / "lake")}, consumer="x",
                            ingest={"max_keys_per_batch": 10_000_000, "max_events_per_batch": 100_000},
                            spark={"conf": {"spark.driver.memory": "6g", "spark.sql.shuffle.partitions": "8"}})
            spark = get_session(base.spark, target_root=base.target.root)
            jobs = {}
            for n, (name, (table, target, engine)) in enumerate(SHAPES.items()):
                settings = base.model_copy(update={
                    "consumer": f"shape{n}", "tables": [table],
                    "target": base.target.model_copy(update={"root": str(work / f"lake{n}")} | target),
                    "ingest": base.ingest.model_copy(update={"engine": engine})})
                jobs[name] = Job(settings, spark, say=lambda line: None, following=True)
                timed(f"first sync: {name}", lambda: run_job(jobs[name]))
            results: dict[int, dict[str, list[float]]] = {}
            for changes in args.changes:
                every = max(2, args.rows // changes)
                changes = args.rows // every  # (what the rounds change: every `every`th row updated)
                print(f"\n{changes} changes a round (every {every}th row updated, every {every * 10}th deleted), "
                      f"{args.rounds} rounds", flush=True)
                results[changes] = {name: [] for name in SHAPES}
                for r in range(args.rounds):
                    for table in ("wide", "wide_cols"):
                        conn.execute(f"update {table} set a = a + 1 where id % {every} = {r}")
                        conn.execute(f"delete from {table} where id % {every * 10} = {r + 1}")
                    for statement in ("vacuum wide", "vacuum wide_cols", "checkpoint"):
                        conn.execute(statement)
                    names = list(SHAPES)
                    for name in names[r % len(names):] + names[:r % len(names)]:
                        results[changes][name].append(timed(f"round {r + 1}: {name}", lambda: run_job(jobs[name])))
            for job in jobs.values():
                job.close()
        print(f"\nresults ({args.rows} rows, local[2]; medians of {args.rounds} rounds):")
        for changes, times in results.items():
            for name, took in times.items():
                engine = name.rsplit(", ", 1)[1]
                plain = median(times[f"plain, {engine}"])
                print(f"  {changes:>8} changes: {name:24s} {median(took):7.2f}s  = {median(took) / plain:5.2f}x the "
                      f"plain mirror ({engine})")
        spark.stop()


if __name__ == "__main__":
    main()
