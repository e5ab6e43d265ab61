"""What a pass as a consistent cut costs (docs/readers.md): every batch read as of the pass's one
exported snapshot against reading the rows as they are, measured side by side in one run (not a
test; never fails on timing).

    python -m bench.cuts [--rows 2000000] [--changes 10000 1000000] [--rounds 2]

On a throwaway PostgreSQL and local Spark, two tables of --rows rows (`a` and `b`, one pass
syncing both, so the snapshot spans two tables) take the same changes each round: every k-th
row updated and a tenth as many deleted. Four consumers apply them, each a long-lived Job as a
follower's runs are, in an order reversed every other round: each engine with `ingest.cuts` on (the
default) and off, every batch applied as a batch (`recopy_fraction` 0: a copy reads in a snapshot
of its own, cut or not). Each time with cuts is printed against the same engine's without.
"""

from __future__ import annotations

from statistics import median

from bench.common import first_synced, load_wide, rounds_args, run_rounds, throwaway
from pgcdc.source import capture

CONSUMERS = {  # name: (engine, cuts)
    "cuts, fast": ("fast", True),
    "no cuts, fast": ("fast", False),
    "cuts, merge": ("merge", True),
    "no cuts, merge": ("merge", False),
}


def main() -> None:
    args = rounds_args(__doc__)
    with throwaway("cuts", settings={"shared_buffers": "1GB", "max_wal_size": "8GB"}) as (pg, work):
        import psycopg

        with psycopg.connect(pg.dsn(), autocommit=True) as conn:
            load_wide(conn, ["a", "b"], args.rows)
            for table in ("a", "b"):
                capture.attach(conn, table)
            spark, jobs = first_synced(pg.dsn(), work, {name: (["public.a", "public.b"], {},
                                                               {"engine": engine, "cuts": cuts,
                                                                "recopy_fraction": 0})
                                                        for name, (engine, cuts) in CONSUMERS.items()})
            results = run_rounds(conn, ["a", "b"], args, jobs)
        print(f"\nresults ({args.rows} rows in each of 2 tables, local[2]; medians of {args.rounds} rounds):")
        for changes, times in results.items():
            for engine in ("fast", "merge"):
                on, off = median(times[f"cuts, {engine}"]), median(times[f"no cuts, {engine}"])
                print(f"  {changes:>8} changes a table, {engine:5s}: cuts {on:7.2f}s, no cuts {off:7.2f}s = "
                      f"{on / off:5.2f}x")
        spark.stop()


if __name__ == "__main__":
    main()
