"""Passes over many small tables, measured side by side in one run (not a test; never fails on timing).

    python -m bench.tables [--tables 200] [--rows 1000] [--parallel 2] [--passes 1] [--profile]

On a throwaway PostgreSQL and local Spark (started once; JVM start excluded) it makes
--tables tables of --rows rows in schema app, attaches the schema, then times one ingest
run (run_job, in this process) for each of:

- first sync of one table (consumer `one`, tables = ["app.t0000"]), the reference;
- first sync of every table (consumer `all1`, tables = ["app.*"]), and with --parallel lanes
  (`[ingest] parallel_tables`, consumer `allN`);
- an idle pass, as a new process runs it (a new Job: what it knows of each table comes from
  the state files) and as a follower runs it (the same Job again: from memory);
- a pass with one changed row in each table (one lane, and --parallel lanes; --passes of each,
  the median printed);
- the first sync of one more table, warm (the first one above also pays for the first use of
  every code path in the JVM, as a new process's first sync does).

With --profile, one more pass with a changed row in each table (one lane) runs under cProfile
and prints where a table's time goes: Py4J round trips and the time waiting on the JVM, SQL
statements and the time waiting on PostgreSQL, the pgcdc functions that take the most, and
the Py4J round trips by the pgcdc function that made them.

Follower lag over many tables: `python -m bench.lag --tables 200 --rows 1000 --rate 200`.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import sys
from collections import Counter
from collections.abc import Callable
from types import FrameType
from typing import Any

import psycopg

from bench.common import throwaway, timed
from pgcdc.settings import Settings
from pgcdc.source import capture, schemas
from pgcdc.spark.session import get_session
from pgcdc.sync.ingest import Job
from pgcdc.sync.runs import run_job



def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tables", type=int, default=200)
    ap.add_argument("--rows", type=int, default=1000)
    ap.add_argument("--parallel", type=int, default=2, help="[ingest] parallel_tables measured beside 1")
    ap.add_argument("--passes", type=int, default=1, help="passes with a changed row in each table, per lane count")
    ap.add_argument("--profile", action="store_true", help="where a changed table's time goes (one more pass)")
    args = ap.parse_args()
    names = [f"t{i:04d}" for i in range(args.tables)]
    with throwaway("tables") as (pg, work):
        dsn = pg.dsn()
        with psycopg.connect(dsn, autocommit=True) as conn:
            capture.install(conn)
            conn.execute("create schema app")
            for name in names:
                conn.execute(f"create table app.{name} (id int primary key, n int, v text, at timestamptz)")
                conn.execute(f"insert into app.{name} select i, i %% 97, md5(i::text), now() "
                             "from generate_series(1, %s) i", (args.rows,))
            conn.execute("analyze")
            schemas.attach_schema(conn, "app")
        spark = get_session()

        def job(consumer: str, tables: list[str], lanes: int = 1) -> Job:
            return Job(Settings(source={"dsn": dsn}, target={"root": str(work / consumer)}, consumer=consumer,
                                tables=tables, ingest={"parallel_tables": lanes}), spark)

        lanes = sorted({1, args.parallel})
        print(f"\n{args.tables} tables of {args.rows} rows, one ingest run each (JVM start excluded); "
              f"parallel_tables {' and '.join(map(str, lanes))}:", flush=True)
        one = timed("first sync of one table", lambda: run_job(job("one", ["app.t0000"])))
        first = {n: timed(f"first sync of all {args.tables}, {n} lane(s)",
                          lambda: run_job(job(f"all{n}", ["app.*"], n))) for n in lanes}
        fresh = timed("idle pass, new Job (state files)", lambda: run_job(job("all1", ["app.*"])))
        followers = {n: job(f"all{n}", ["app.*"], n) for n in lanes}
        for follower in followers.values():
            run_job(follower)
        kept = timed("idle pass, same Job again (a follower's: from memory)", lambda: run_job(followers[1]))
        changed: dict[int, list[float]] = {n: [] for n in lanes}
        for i in range(args.passes):  # (the lanes in turn, which goes first alternating)
            for n in lanes if i % 2 == 0 else lanes[::-1]:
                with psycopg.connect(dsn, autocommit=True) as conn:
                    for name in names:
                        conn.execute(f"update app.{name} set v = 'changed {i}' where id = 1")
                changed[n].append(timed(f"one changed row in each of the {args.tables}, {n} lane(s), pass {i + 1}",
                                        lambda: run_job(followers[n])))
        if args.profile:
            with psycopg.connect(dsn, autocommit=True) as conn:
                for name in names:
                    conn.execute(f"update app.{name} set v = 'profiled' where id = 1")
            _profiled(lambda: run_job(followers[1]), args.tables)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("create table app.extra (like app.t0000 including all)")
            conn.execute("insert into app.extra select * from app.t0000")
            capture.attach(conn, "app.extra")
        warm = timed("first sync of one more table, warm (its code paths run before)",
                     lambda: run_job(job("warm", ["app.extra"])))
        for n in lanes:
            print(f"\n{n} lane(s): first sync of {args.tables} / first sync of one: {first[n] / one:.1f}x (goal <= 8x); "
                  f"against the warm one: {first[n] / warm:.1f}x; one change in each: {statistics.median(changed[n]):.2f} s "
                  f"(median of {args.passes}) "
                  f"(goal <= {20 if args.tables <= 200 else 60} s at {200 if args.tables <= 200 else 1000} tables)")
        print(f"idle pass: {fresh:.2f} s new Job, {kept:.2f} s follower (goal <= 2 s)")
        spark.stop()


def _profiled(work: Callable[[], object], tables: int) -> None:
    """Run `work` under cProfile; print per table its Py4J round trips and SQL statements, the
    seconds spent waiting on each, and the pgcdc functions taking the most (cumulative)."""
    import psycopg
    from py4j.clientserver import ClientServerConnection

    trips: Counter[str] = Counter()
    statements_by: Counter[str] = Counter()
    undo = [_by_caller(ClientServerConnection, "send_command", trips, lambda command: command[:1]),
            _by_caller(psycopg.Cursor, "execute", statements_by, lambda query: " ".join(str(query).split())[:60])]
    profile = cProfile.Profile()
    try:
        profile.enable()
        work()
        profile.disable()
    finally:
        for done in undo:
            done()
    stats = pstats.Stats(profile)
    total = max(row[3] for row in stats.stats.values())  # type: ignore[attr-defined]

    def summed(file_part: str, function: str) -> tuple[int, float]:
        rows = [v for k, v in stats.stats.items() if file_part in k[0] and k[2] == function]  # type: ignore[attr-defined]
        return sum(r[1] for r in rows), sum(r[3] for r in rows)
    py4j, jvm = summed("py4j/clientserver", "send_command")
    statements, pg = summed("psycopg/cursor", "execute")
    print(f"\nprofiled pass, one changed row in each of the {tables} tables: {total:.2f} s, {total / tables * 1000:.0f} ms "
          f"a table: {py4j / tables:.0f} Py4J round trips ({jvm / tables * 1000:.0f} ms waiting on the JVM), "
          f"{statements / tables:.0f} SQL statements ({pg / tables * 1000:.0f} ms waiting on PostgreSQL), the rest "
          "Python (planning, pyarrow, the GIL)")
    # (the run's own frames, which hold most of the pass, left out: below them, where it goes)
    mine = sorted(((v[3], k) for k, v in stats.stats.items()  # type: ignore[attr-defined]
                   if "/pgcdc/" in k[0] and v[3] < 0.5 * total), reverse=True)
    for seconds, (file, line, function) in mine[:15]:
        print(f"  {seconds / tables * 1000:6.1f} ms a table  {file.split('/pgcdc/')[1]}:{line} {function}")
    print("Py4J round trips a table, by the pgcdc function that made them [the command: c call, r reflection, "
          "m memory, i constructor, ...]:")
    for where, count in trips.most_common(20):
        print(f"  {count / tables:6.1f}  {where}")
    print("SQL statements a table, by the pgcdc function that sent them [the statement's start]:")
    for where, count in statements_by.most_common(30):
        print(f"  {count / tables:6.1f}  {where}")


def _by_caller(owner: type, name: str, counter: "Counter[str]", what: "Callable[[Any], str]") -> Callable[[], None]:
    """Count calls of `owner.name` by the innermost pgcdc function on the stack (and `what`
    of its first argument) into `counter`, until the function returned is called."""
    real = getattr(owner, name)

    def counted(self: Any, first: Any, *args: Any, **kwargs: Any) -> Any:
        frame: "FrameType | None" = sys._getframe(1)
        while frame is not None and "/pgcdc/" not in frame.f_code.co_filename:
            frame = frame.f_back
        where = "(outside pgcdc)" if frame is None else \
            f"{frame.f_code.co_filename.split('/pgcdc/')[1]}:{frame.f_code.co_name}"
        counter[f"{where} [{what(first)}]"] += 1
        return real(self, first, *args, **kwargs)
    setattr(owner, name, counted)
    return lambda: setattr(owner, name, real)


if __name__ == "__main__":
    main()
