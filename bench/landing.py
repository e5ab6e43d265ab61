"""What each landing shape (docs/columns.md, docs/history.md) costs beside the plain mirror, measured side by side
in one run (not a test; never fails on timing).

    python -m bench.landing [--rows 2000000] [--changes 10000 1000000] [--rounds 2]

On a throwaway PostgreSQL and local Spark, two tables of --rows rows (`wide` and its copy
`wide_cols`, attached with --exclude-columns b,c: the wide text and numeric columns never read)
take the same changes each round: every k-th row updated and a tenth as many deleted. One
consumer per shape applies them, each a long-lived Job as a follower's runs are, in an order
reversed every other round: the plain mirror with each engine, the column choice, soft deletes and
metadata columns with each engine, the change data feed alone (the merge engine's: its readers
expect update pre- and post-images) and the history with each engine (docs/history.md: the
change data feed, and the history's fold after each run). Each shape's time is printed against
the plain mirror's with the same engine.
"""

from __future__ import annotations

from statistics import median

from bench.common import first_synced, load_wide, rounds_args, run_rounds, throwaway
from pgcdc.source import capture

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
    args = rounds_args(__doc__)
    with throwaway("landing", settings={"shared_buffers": "1GB", "max_wal_size": "8GB"}) as (pg, work):
        import psycopg

        with psycopg.connect(pg.dsn(), autocommit=True) as conn:
            load_wide(conn, ["wide", "wide_cols"], args.rows)
            capture.attach(conn, "wide")
            capture.attach(conn, "wide_cols", exclude_columns=["b", "c"])
            spark, jobs = first_synced(pg.dsn(), work, {name: ([table], target, {"engine": engine})
                                                        for name, (table, target, engine) in SHAPES.items()})
            results = run_rounds(conn, ["wide", "wide_cols"], args, jobs)
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
