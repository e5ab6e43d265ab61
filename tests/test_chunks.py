"""Copies in chunks: each chunk in a snapshot of its own and one Delta commit carrying the copy's
progress; a copy stopped or failed anywhere resumes after its last chunk; readers never see a
half table; writers go on meanwhile.

The oracle: PostgreSQL read with psycopg, the Delta table read with the suite's Spark session."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable

import psycopg
import pytest

import pgcdc.faults
from fixtures.ingest import Syncer
from pgcdc.source import capture
from pgcdc.sync.runs import resync
from pgcdc.checks.status import status_data, status_report

CHUNK = 300
FIXED = {"chunk_rows": CHUNK, "chunk_seconds": 0}  # (fixed chunks: the tests count them)


def _table(db: psycopg.Connection, name: str = "public.big", rows: int = 2000, key: str = "id bigint") -> None:
    keyed = "gen_random_uuid()" if "uuid" in key else "'k' || lpad(i::text, 6, '0')" if "text" in key else "i * 3"
    db.execute(f"create table {name} ({key} primary key, n int not null, pad text); insert into {name} "
               f"select {keyed}, i, repeat('x', i % 50) from generate_series(1, {rows}) i; analyze {name}")
    capture.attach(db, name)


def _pg(db: psycopg.Connection, name: str = "public.big") -> set[tuple[Any, ...]]:
    return {tuple(r) for r in db.execute(f"select id::text, n, pad from {name}").fetchall()}


def _delta(syncer: Syncer, name: str = "public.big") -> set[tuple[Any, ...]]:
    return {(str(r["id"]), r["n"], r["pad"]) for r in syncer.delta(name).collect()}


class Stop(Exception):
    pass


def _at(monkeypatch: pytest.MonkeyPatch, act: Callable[[str, int], None]) -> None:
    """Call act(failpoint, how many times that failpoint was passed before) at every failpoint."""
    seen: dict[str, int] = {}

    def failpoint(name: str) -> None:
        n = seen.get(name, 0)
        seen[name] = n + 1
        act(name, n)
    monkeypatch.setattr(pgcdc.faults, "failpoint", failpoint)


def _state(syncer: Syncer, name: str = "public.big") -> dict[str, Any]:
    return json.loads(Path(syncer.path(name), "_pgcdc", "test.json").read_text())


def test_a_first_sync_killed_half_way_resumes_from_its_last_chunk_with_writers_on(
        db: psycopg.Connection, syncer: Syncer, monkeypatch: pytest.MonkeyPatch) -> None:
    _table(db)
    writer = psycopg.connect(syncer.dsn, autocommit=True)

    def act(name: str, n: int) -> None:
        if name == "before-chunk-commit":
            # writes all over the table while chunks are read: rows of copied ranges, of ranges to
            # come, keys moved from one range to another, deletes and inserts
            writer.execute(f"update public.big set n = n + 1000 where id % 7 = {n}")
            writer.execute(f"update public.big set id = id + 6001 where id = {3 * (n * 150 + 1)}")
            writer.execute(f"delete from public.big where id between {n * 400} and {n * 400 + 5}")
            writer.execute(f"insert into public.big values ({10_000 + n}, {n}, 'new'), ({-n - 1}, {n}, 'low')")
        if name == "after-chunk-commit" and n == 3:
            raise Stop("killed after chunk 4")
    _at(monkeypatch, act)
    with pytest.raises(Exception, match="killed after chunk 4"):
        syncer.run(copies=FIXED)
    state = _state(syncer)
    assert state["copy"]["chunks"] == 4 and state["copy"]["rows"] == 4 * CHUNK, state
    # a first copy under way: readers see the rows of the key ranges its committed chunks replaced,
    # none beyond them (docs/readers.md)
    keys = [r.id for r in syncer.delta("public.big").select("id").collect()]
    assert keys and max(keys) < json.loads(state["copy"]["after"]), (max(keys), state["copy"]["after"])
    syncer.lines.clear()
    syncer.run(copies=FIXED)
    assert any("resuming its copy at" in line and "chunk 5" in line for line in syncer.lines), syncer.lines
    assert any("copy done" in line for line in syncer.lines), syncer.lines
    assert "copy" not in _state(syncer)
    writer.close()
    syncer.run()
    assert _delta(syncer) == _pg(db)
    # every chunk one commit carrying the copy's progress (and the table's creation)
    history = syncer.spark.sql(f"describe history delta.`{syncer.path('public.big')}`").collect()
    writes = [h for h in history if h.operation == "WRITE"]
    assert len(writes) >= 2000 // CHUNK
    # the table held no row when the copy began: each chunk appends (nothing to replace), resumed too
    assert {h.operationParameters["mode"] for h in writes} == {"Append"}, writes


def test_a_resync_never_shows_readers_fewer_rows_and_each_chunk_has_its_own_snapshot(
        db: psycopg.Connection, syncer: Syncer, monkeypatch: pytest.MonkeyPatch) -> None:
    _table(db)
    syncer.run()
    rows = len(_pg(db))
    seen: list[int] = []
    checker = psycopg.connect(syncer.dsn, autocommit=True)
    began: list[Any] = []

    def act(name: str, n: int) -> None:
        if name == "before-chunk-commit":
            # no session holds a snapshot from before this chunk's: the previous chunk's ended
            now = checker.execute("select clock_timestamp()").fetchone()[0]
            held = checker.execute(
                "select min(xact_start) from pg_stat_activity where backend_xmin is not null "
                "and pid <> pg_backend_pid() and datname = current_database()").fetchone()[0]
            if began:
                assert held is not None and held > began[-1], (held, began)
            began.append(now)
            seen.append(syncer.delta("public.big").count())
    _at(monkeypatch, act)
    resync(syncer.settings(copies=FIXED), ["public.big"], spark=syncer.spark, say=syncer.lines.append)
    checker.close()
    assert len(seen) >= 2000 // CHUNK and min(seen) >= rows, seen
    assert _delta(syncer) == _pg(db)
    # a full table: each chunk replaces its range (replaceWhere), never appends beside the old rows
    history = syncer.spark.sql(f"describe history delta.`{syncer.path('public.big')}` limit {len(seen)}").collect()
    assert {h.operationParameters["mode"] for h in history} == {"Overwrite"}, history


@pytest.mark.parametrize("key", ["id uuid", "id text collate \"C\""])
def test_uuid_and_c_text_keys_are_copied_in_chunks(db: psycopg.Connection, syncer: Syncer, key: str) -> None:
    _table(db, rows=1000, key=key)
    syncer.run(copies={"chunk_rows": 200, "chunk_seconds": 0})
    assert any("copying the table in chunks of 200 rows" in line for line in syncer.lines), syncer.lines
    assert any("copy done: 1,000 rows in 5 chunks" in line for line in syncer.lines), syncer.lines
    assert _delta(syncer) == _pg(db)


def test_status_shows_a_copy_under_way(db: psycopg.Connection, syncer: Syncer, monkeypatch: pytest.MonkeyPatch) -> None:
    _table(db)

    def act(name: str, n: int) -> None:
        if name == "after-chunk-commit" and n == 1:
            raise Stop("stopped after chunk 2")
    _at(monkeypatch, act)
    with pytest.raises(Exception, match="stopped after chunk 2"):
        syncer.run(copies=FIXED)
    data = status_data(db)
    (mine,) = [c for c in data["synced"] if c["table"] == "public.big"]
    assert mine["copy"]["rows"] == 2 * CHUNK and mine["copy"]["total"] == 2000, mine
    assert mine["state"] == "failed" and mine["copy"]["fraction"] == 0.3 and not data["healthy"], mine
    assert any("copy of public.big stopped at 30% (chunk 2)" in p and "pgcdc ingest" in p for p in data["problems"])
    text, healthy = status_report(db)
    assert "failed (30%" in text and not healthy, text
    syncer.run(copies=FIXED)
    data = status_data(db)
    (mine,) = [c for c in data["synced"] if c["table"] == "public.big"]
    assert mine["copy"] is None and mine["state"] == "synced" and data["healthy"], data


def test_a_key_whose_order_spark_does_not_share_is_copied_in_one_snapshot(
        db: psycopg.Connection, syncer: Syncer) -> None:
    _table(db, rows=600, key='id text collate "und-x-icu"')
    syncer.run(copies={"chunk_rows": 100, "chunk_seconds": 0})
    assert not any("in chunks" in line for line in syncer.lines), syncer.lines
    assert _delta(syncer) == _pg(db)


def test_max_rows_per_second_waits_between_chunks(db: psycopg.Connection, syncer: Syncer,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from pgcdc.sync import chunked_copy as chunked

    _table(db, rows=1000)
    waits: list[float] = []
    import time
    from types import SimpleNamespace

    # the chunked copy's clock, its waits recorded rather than slept
    monkeypatch.setattr(chunked, "time", SimpleNamespace(monotonic=time.monotonic, time=time.time,
                                                         sleep=lambda seconds: waits.append(seconds)))
    syncer.run(copies={"chunk_rows": 250, "chunk_seconds": 0, "max_rows_per_second": 50})
    # 4 chunks, a wait after each but the last, for the average to stay at 50 rows/s: after
    # chunk n the 250 * n rows read take 5 * n s, less the time the chunks took (the waits
    # recorded were not slept, so each makes up for all of them)
    assert len(waits) == 3 and all(0 < w < 5 * (n + 1) for n, w in enumerate(waits)), waits
    assert _delta(syncer) == _pg(db)


def test_chunks_after_the_first_are_sized_by_the_pace_of_the_last(db: psycopg.Connection, syncer: Syncer,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from pgcdc.sync import chunked_copy as chunked

    _table(db, rows=2000)
    import time
    from types import SimpleNamespace

    # the chunked copy's clock says each chunk took 1 s: at 100 rows a second and chunk_seconds
    # 3, the second chunk is 300 rows, the third 900, the fourth the 700 left
    ticks = iter(range(10 ** 6))
    monkeypatch.setattr(chunked, "time", SimpleNamespace(monotonic=lambda: float(next(ticks)), time=time.time,
                                                         sleep=time.sleep))
    syncer.run(copies={"chunk_rows": 100, "chunk_seconds": 3})
    copied = [line.split("copied: ")[1].split(" rows")[0] for line in syncer.lines if "chunk" in line and "copied: " in line]
    assert copied == ["100", "400", "1,300"], syncer.lines
    assert any("copy done: 2,000 rows in 4 chunks" in line for line in syncer.lines), syncer.lines
    assert _delta(syncer) == _pg(db)


def test_paced_rows_stay_between_an_eighth_and_64_times_the_first_chunk() -> None:
    from pgcdc.settings import CopySettings
    from pgcdc.sync.chunked_copy import paced_rows

    paced = CopySettings(chunk_rows=1000, chunk_seconds=5)
    assert paced_rows(paced, 1000, 1000, 1.0) == 5000
    assert paced_rows(paced, 1000, 1000, 100.0) == 125  # (a slow source: smaller chunks, short snapshots)
    assert paced_rows(paced, 1000, 1000, 0.001) == 64_000
    assert paced_rows(CopySettings(chunk_rows=1000, chunk_seconds=0), 1000, 1000, 1.0) == 1000


def test_a_truncate_and_a_resync_in_the_middle_of_a_copy(db: psycopg.Connection, syncer: Syncer,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    _table(db)
    writer = psycopg.connect(syncer.dsn, autocommit=True)

    def act(name: str, n: int) -> None:
        if name == "before-chunk-commit" and n == 1:  # (TRUNCATE is not MVCC-safe: later chunks see it)
            writer.execute("truncate public.big; insert into public.big select i * 3, i, 'after' "
                           "from generate_series(1, 1500) i")
        if name == "after-chunk-commit" and n == 2:
            raise Stop("killed after chunk 3")
    _at(monkeypatch, act)
    with pytest.raises(Exception, match="killed after chunk 3"):
        syncer.run(copies=FIXED)
    assert _state(syncer)["copy"]["chunks"] == 3
    # a resync now starts a new copy (the one under way is dropped), stopped after its first chunk
    writer.execute("update public.big set n = -n where id % 2 = 0")

    def stop(name: str, n: int) -> None:
        if name == "after-chunk-commit" and n == 0:
            raise Stop("resync stopped")
    _at(monkeypatch, stop)
    with pytest.raises(Exception, match="resync stopped"):
        resync(syncer.settings(copies=FIXED), ["public.big"], spark=syncer.spark)
    assert _state(syncer)["copy"]["chunks"] == 1
    monkeypatch.undo()
    writer.close()
    syncer.lines.clear()
    syncer.run(copies=FIXED)
    assert any("resuming its copy at" in line and "chunk 2" in line for line in syncer.lines), syncer.lines
    syncer.run()
    assert _delta(syncer) == _pg(db) and len(_pg(db)) == 1500


def test_a_composite_key_whose_first_column_repeats_is_cut_between_its_values(
        db: psycopg.Connection, syncer: Syncer) -> None:
    # more rows share each first value than a chunk holds: a chunk takes all of one value
    db.execute("create table public.pairs (bucket int, id int, v text, primary key (bucket, id)); "
               "insert into public.pairs select b, i, 'v' || i from generate_series(0, 2) b, "
               "generate_series(1, 400) i; analyze public.pairs")
    capture.attach(db, "public.pairs")
    syncer.run(copies={"chunk_rows": 100, "chunk_seconds": 0})
    assert any("copy done: 1,200 rows in 3 chunks" in line for line in syncer.lines), syncer.lines
    got = {(r["bucket"], r["id"], r["v"]) for r in syncer.delta("public.pairs").collect()}
    assert got == {tuple(r) for r in db.execute("select bucket, id, v from public.pairs").fetchall()}


def test_a_truncate_while_a_chunk_is_read_neither_waits_for_the_copy_nor_stalls_it(
        db: psycopg.Connection, syncer: Syncer, monkeypatch: pytest.MonkeyPatch) -> None:
    """A chunk's exporting transaction holds no lock on the table: a TRUNCATE issued as the chunk
    is about to be read gets its lock at once (were the transaction holding one, the TRUNCATE
    would wait for it, the chunk's reads would queue behind the TRUNCATE, and both would wait
    until the TRUNCATE's lock_timeout)."""
    import threading

    _table(db)
    outcome: list[str] = []

    def truncate() -> None:
        with psycopg.connect(syncer.dsn, autocommit=True) as app:
            app.execute("set lock_timeout = '20s'")
            try:
                app.execute("truncate public.big; insert into public.big values (1, 1, 'after')")
                outcome.append("done")
            except psycopg.errors.LockNotAvailable:
                outcome.append("waited 20 s for the copy")
    threads: list[threading.Thread] = []

    def act(name: str, n: int) -> None:
        if name == "before-chunk-commit" and n == 1:
            threads.append(threading.Thread(target=truncate))
            threads[0].start()
            time.sleep(0.5)  # (the TRUNCATE takes or waits for its lock before the chunk's reads begin)
    _at(monkeypatch, act)
    syncer.run(copies=FIXED)
    threads[0].join()
    assert outcome == ["done"], outcome
    syncer.run()
    assert _delta(syncer) == _pg(db) == {("1", 1, "after")}


def test_a_copys_row_count_with_soft_deletes_counts_the_rows_it_found(db: psycopg.Connection, syncer: Syncer) -> None:
    """A resync in chunks keeps the rows it no longer finds, marked: its "copy done" line and
    the run's report count the rows PostgreSQL has, not the marked ones written beside them."""
    _table(db)
    soft = {"target": {"deletes": "soft"}, "copies": FIXED}
    syncer.run(**soft)
    db.execute("delete from public.big where n % 3 = 0")
    rows = len(_pg(db))
    lines = len(syncer.lines)
    reports = resync(syncer.settings(**soft), ["public.big"], spark=syncer.spark, say=syncer.lines.append)
    done = [line for line in syncer.lines[lines:] if "copy done" in line]
    assert done and f"copy done: {rows:,} rows" in done[0], done
    assert [r.copied for r in reports] == [rows]
    assert syncer.delta("public.big").where("_pgcdc_deleted").count() == 2000 - rows
    assert syncer.delta("public.big").count() == 2000  # (each row once)


def test_a_resync_in_chunks_counts_the_rows_it_copied_not_those_delta_kept_beside_them(
        db: psycopg.Connection, syncer: Syncer) -> None:
    """Each chunk replaces its key range in files that also hold other rows: Delta's count of the
    rows a replaceWhere wrote includes those it copied from the files it rewrote; the report
    counts the rows read from PostgreSQL. (The first copy writes one file, each chunk of the
    resync cuts it.)"""
    _table(db)
    syncer.run()
    reports = resync(syncer.settings(copies=FIXED), ["public.big"], spark=syncer.spark, say=syncer.lines.append)
    assert [r.copied for r in reports] == [2000], syncer.lines[-3:]
    assert _delta(syncer) == _pg(db)
