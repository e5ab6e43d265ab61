"""What the benchmarks share: a throwaway PostgreSQL and a work folder for one run."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pgcdc.localpg import LocalPostgres


@contextmanager
def throwaway(name: str, **postgres: Any) -> Iterator[tuple[LocalPostgres, Path]]:
    """A started throwaway PostgreSQL (LocalPostgres options `postgres`) and an empty work folder
    named after the benchmark, both removed when the benchmark ends, however it ends."""
    work = Path(tempfile.mkdtemp(prefix=f"pgcdc-bench-{name}-"))
    pg = LocalPostgres(Path(tempfile.mkdtemp(prefix="pgcdc-bench-pg-")), **postgres)
    try:
        pg.start()
        yield pg, work
    finally:
        pg.stop(remove=True)
        shutil.rmtree(work, ignore_errors=True)


def timed(label: str, work: Callable[[], object], width: int = 62) -> float:
    """Run `work`, print how long it took beside `label`, and return the seconds."""
    began = time.perf_counter()
    work()
    seconds = time.perf_counter() - began
    print(f"  {label:{width}s} {seconds:8.2f}s", flush=True)
    return seconds


def change_rounds(conn: Any, tables: list[str], rows: int, counts: list[int], rounds: int,
                  runs: dict[str, Callable[[], object]]) -> dict[int, dict[str, list[float]]]:
    """For each count of changes: `rounds` rounds, each updating every k-th row of `tables` (of
    `rows` rows) and deleting a tenth as many (vacuum and checkpoint untimed), then timing each
    of `runs` (its consumer applying them), in an order reversed every other round: the first to
    read a round's changed rows pays for setting their hint bits and warming the caches, so each of
    two neighbours goes first as often (take an even number of rounds). Seconds by count and name."""
    results: dict[int, dict[str, list[float]]] = {}
    for changes in counts:
        every = max(2, rows // changes)
        changes = rows // every  # (what the rounds change: every `every`th row updated)
        print(f"\n{changes} changes a round (every {every}th row updated, every {every * 10}th deleted), "
              f"{rounds} rounds", flush=True)
        results[changes] = {name: [] for name in runs}
        for r in range(rounds):
            for table in tables:
                conn.execute(f"update {table} set a = a + 1 where id % {every} = {r}")
                conn.execute(f"delete from {table} where id % {every * 10} = {r + 1}")
            for statement in [*(f"vacuum {t}" for t in tables), "checkpoint"]:
                conn.execute(statement)
            names = list(runs) if r % 2 == 0 else list(reversed(runs))
            for name in names:
                results[changes][name].append(timed(f"round {r + 1}: {name}", runs[name]))
    return results


def rounds_args(doc: str | None) -> Any:
    """The arguments bench.landing and bench.cuts share: --rows, --changes, --rounds."""
    import argparse

    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--changes", type=int, nargs="+", default=[10_000, 1_000_000])
    ap.add_argument("--rounds", type=int, default=2)
    return ap.parse_args()


def first_synced(dsn: str, work: Path, variants: dict[str, tuple[list[str], dict[str, Any], dict[str, Any]]]
                 ) -> tuple[Any, dict[str, Any]]:
    """A local Spark session and, per variant (its tables, target and ingest settings), a long-lived
    Job (as a follower's runs are) of a consumer and a lake of its own, its tables first synced."""
    from pgcdc.settings import Settings
    from pgcdc.spark.session import get_session
    from pgcdc.sync.ingest import Job
    from pgcdc.sync.runs import run_job

    base = Settings(source={"dsn": dsn}, target={"root": str(work / "lake")}, consumer="x",
                    ingest={"max_keys_per_batch": 10_000_000, "max_events_per_batch": 100_000},
                    spark={"conf": {"spark.driver.memory": "6g", "spark.sql.shuffle.partitions": "8"}})
    spark = get_session(base.spark, target_root=base.target.root)
    jobs = {}
    for n, (name, (tables, target, ingest)) in enumerate(variants.items()):
        settings = base.model_copy(update={
            "consumer": f"variant{n}", "tables": tables,
            "target": base.target.model_copy(update={"root": str(work / f"lake{n}")} | target),
            "ingest": base.ingest.model_copy(update=ingest)})
        jobs[name] = Job(settings, spark, say=lambda line: None, following=True)
        timed(f"first sync: {name}", lambda: run_job(jobs[name]))
    return spark, jobs


def load_wide(conn: Any, tables: list[str], rows: int) -> None:
    """Create and fill `tables`, each `rows` rows of (id, a int, b text of 64, c numeric, d timestamptz),
    and install pgcdc (attaching is the caller's)."""
    from pgcdc.source import capture

    print(f"loading {rows} rows into {', '.join(tables)} ...", flush=True)
    for table in tables:
        conn.execute(f"create table {table} (id bigint primary key, a int not null, b text not null, "
                     "c numeric(12,2), d timestamptz not null default now())")
        conn.execute(f"insert into {table} (id, a, b, c) select i, i %% 1000, md5(i::text) || "
                     "md5((i * 7)::text), (i %% 100000) / 100.0 from generate_series(1, %s) i", (rows,))
        conn.execute(f"vacuum analyze {table}")
    capture.install(conn)


def run_rounds(conn: Any, tables: list[str], args: Any, jobs: dict[str, Any]) -> dict[int, dict[str, list[float]]]:
    """change_rounds with each Job's run, then the Jobs closed."""
    from pgcdc.sync.runs import run_job

    results = change_rounds(conn, tables, args.rows, args.changes, args.rounds,
                            {name: (lambda job=job: run_job(job)) for name, job in jobs.items()})
    for job in jobs.values():
        job.close()
    return results


def rows_read(conn: Any, tables: str) -> int:
    """Rows PostgreSQL has read so far of the tables whose names are LIKE `tables` (seq_tup_read +
    idx_tup_fetch), once every session reported its counters."""
    conn.execute("select pg_stat_force_next_flush()")
    time.sleep(1.2)  # (another session reports its counters when it ends or within a second when idle)
    conn.execute("select pg_stat_clear_snapshot()")
    return int(conn.execute("select coalesce(sum(coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0)), 0) "
                            "from pg_stat_user_tables where relname like %s", (tables,)).fetchone()[0])


def timed_run(conn: Any, job: Any, tables: str, label: str, statement: str | None,
              copy: str | None = None) -> tuple[str, float, int]:
    """Run `statement` (untimed), then one ingest run of `job` (or a resync of table `copy`), timed;
    print and return the label, its seconds and the rows PostgreSQL read of `tables` (rows_read)."""
    from pgcdc.sync.runs import resync_tables, run_job

    if statement:
        conn.execute(statement)
    before = rows_read(conn, tables)
    began = time.perf_counter()
    if copy:
        resync_tables(job, [copy])
    else:
        run_job(job)
    seconds = time.perf_counter() - began
    read = rows_read(conn, tables) - before
    print(f"  {label:50s} {seconds:7.2f}s  {read:>12,} rows read from PostgreSQL", flush=True)
    return label, seconds, read


def load_attached(conn: Any, rows: int) -> None:
    """pgcdc installed and table `t` (bigint key, an int, a 32-character text) of `rows` rows
    loaded, vacuumed and attached: what bench.repair and bench.restore start from."""
    from pgcdc.source import capture

    capture.install(conn)
    print(f"loading {rows:,} rows ...", flush=True)
    conn.execute("create table t (id bigint primary key, v int not null, s text)")
    conn.execute(f"insert into t select i, i % 1000, md5(i::text) from generate_series(1, {rows}) i")
    conn.execute("vacuum analyze t")
    capture.attach(conn, "t")


def local_job(dsn: str, work: Path) -> Any:
    """A Job of consumer "bench" syncing into <work>/lake on a local Spark (6 GiB driver), its
    lines printed indented."""
    from pgcdc.settings import Settings
    from pgcdc.spark.session import get_session
    from pgcdc.sync.ingest import Job

    settings = Settings(source={"dsn": dsn}, target={"root": str(work / "lake")}, consumer="bench",
                        spark={"conf": {"spark.driver.memory": "6g", "spark.sql.shuffle.partitions": "8"}})
    spark = get_session(settings.spark, target_root=settings.target.root)
    return Job(settings, spark, say=lambda line: print("    " + line, flush=True))
