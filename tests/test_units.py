"""Pure functions: txid sets, state transitions, batch filters, target paths; the key index on plain files."""

from __future__ import annotations

from pathlib import Path

import pytest

from pgcdc.lake.paths import target_path
from pgcdc.source.capture import AttachedTable
from pgcdc.source.columns import Column
from pgcdc.source.enrich import batch_partitions, keys_fit_driver
from pgcdc.source.events import Batch, Snapshot, _ranges_between_gaps
from pgcdc.watermark import ConsumerState, TxidSet


def test_txid_set_merges_and_encodes() -> None:
    s = TxidSet.of([(5, 5), (1, 3), (4, 4), (10, 12)])
    assert s.ranges == ((1, 5), (10, 12))
    assert 11 in s and 7 not in s and len(s) == 8
    assert TxidSet.decode(s.encode()) == s and s.encode() == "1-5,10-12"
    assert s.at_or_above(11).ranges == ((11, 12),)
    assert TxidSet.decode("") == TxidSet()


def test_state_watermark_only_moves_up_and_swallows_adjacent_ranges() -> None:
    st = ConsumerState("c", "public.t", 1, "sys", watermark=100, out_of_order=TxidSet.of([(105, 107)]), batch=4)
    lower = st.next(90, TxidSet())
    assert lower.watermark == 100 and lower.batch == 5  # a lower txmin never moves it back
    caught = st.next(105, TxidSet.of([(110, 110)]))
    assert caught.watermark == 108  # 105-107 already applied: the watermark passes them
    assert caught.out_of_order.ranges == ((110, 110),)
    assert ConsumerState.from_json(caught.to_json()) == caught
    assert ConsumerState.from_json('{"other": 1}') is None and ConsumerState.from_json("not json") is None


def test_batch_filter_selects_exactly_the_batch() -> None:
    b = Batch(7, 100, 200, TxidSet.of([(150, 151)]), TxidSet.of([(205, 209)]), 3, 3, False, None)
    sql = b.filter_sql("q")
    assert sql.startswith("q.table_id = 7 and ")
    assert "q.txid >= '100'::xid8 and q.txid < '200'::xid8" in sql
    assert "not (q.txid between '150'::xid8 and '151'::xid8)" in sql
    assert "or q.txid between '205'::xid8 and '209'::xid8" in sql


def test_out_of_order_ranges_never_span_a_running_transaction() -> None:
    primary = Snapshot(txmin=100, xmax=120, in_progress=(100, 104), standby=False)
    assert _ranges_between_gaps([101, 103, 106, 107, 110], primary).ranges == ((101, 103), (106, 110))
    standby = Snapshot(txmin=100, xmax=120, in_progress=(), standby=True)
    assert _ranges_between_gaps([101, 103, 104], standby).ranges == ((101, 101), (103, 104))


@pytest.mark.parametrize("table,folder", [("public.t", "public.t"), ('"Sales Dept"."Order ""X"""', 'Sales Dept.Order "X"'),
                                          ('a."b/c"', "a.b%2Fc")])
def test_target_path(table: str, folder: str) -> None:
    assert target_path("s3://bucket/lake/", table) == f"s3://bucket/lake/{folder}"


@pytest.mark.parametrize(("keys", "slots", "expected"), [(0, 8, 1), (1, 8, 1), (100_000, 8, 1), (100_001, 8, 2),
                                                         (250_000, 8, 3), (10_000_000, 8, 4), (10_000_000, 2, 2),
                                                         (250_000, 1, 1)])
def test_batch_partitions_grow_with_the_batch_up_to_the_setting_and_spark_slots(keys: int, slots: int,
                                                                                expected: int) -> None:
    assert batch_partitions(keys, 100_000, 4, slots) == expected


@pytest.mark.parametrize(("columns", "fits"), [
    ([Column("id", "bigint", "int8", False, None)], True),
    ([Column("id", "text", "text", False, None)], True),
    ([Column("id", "uuid", "uuid", False, None)], True),          # held as text
    ([Column("id", "numeric", "numeric", False, None)], True),    # unconstrained: held as text
    ([Column("id", "numeric(10,2)", "numeric", False, 10)], False),  # held as decimal
    ([Column("id", "timestamp with time zone", "timestamptz", False, None)], False),
    ([Column("id", "character(3)", "bpchar", False, None)], False),
    ([Column("id", "integer[]", "int4", True, None)], False),
    ([Column("id", "integer", "int4", False, None), Column("n", "text", "text", False, None)], True),
    ([Column("id", "integer", "int4", False, None), Column("d", "date", "date", False, None)], False),
])
def test_keys_fit_the_driver_path_only_when_held_as_integers_or_text(columns: list[Column], fits: bool) -> None:
    table = AttachedTable(1, "public.t", [c.name for c in columns], [c.type_sql for c in columns], None, None)
    assert keys_fit_driver(table, columns) is fits


def test_driver_file_statistics_count_nulls_and_bound_orderable_columns() -> None:
    """(Checked value by value against Delta's writer in test_fast_commits.py.)"""
    import json

    import pyarrow as pa

    from pgcdc.engines.fast.file_stats import collect

    table = pa.table({"id": pa.array([3, 1, None], pa.int64()), "s": ["a", None, "b"],
                      "l": pa.array([[1], None, [2]], pa.list_(pa.int32())), "n": pa.array([None] * 3, pa.int16())})
    assert json.loads(collect(table, {}, "UTC", 32) or "") == {
        "numRecords": 3, "minValues": {"id": 1, "s": "a"}, "maxValues": {"id": 3, "s": "b"},
        "nullCount": {"id": 1, "s": 1, "l": 1, "n": 3}, "tightBounds": True}
    assert collect(table, {"delta.dataSkippingStatsColumns": "id"}, "UTC", 32) is None


def test_key_index_reads_like_the_parquet_file_and_is_made_again_when_damaged(tmp_path, monkeypatch) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pgcdc.engines.fast import key_index

    table_dir = tmp_path / "t"
    table_dir.mkdir()
    data = str(table_dir / "part-1.parquet")
    pq.write_table(pa.table({"id": pa.array([5, 3, 9], pa.int64()), "v": ["a", "b", "c"]}), data)
    reads: list[str] = []
    real_read = pq.read_table
    monkeypatch.setattr(pq, "read_table", lambda path, *a, **k: reads.append(path) or real_read(path, *a, **k))

    assert key_index.key_column(str(table_dir), data, "id").to_pylist() == [5, 3, 9]  # file order
    index = key_index.index_path(str(table_dir), data)
    assert reads == [data] and index == str(table_dir / "_pgcdc" / "keys" / "part-1.parquet.arrow")
    assert key_index.key_column(str(table_dir), data, "id").to_pylist() == [5, 3, 9]
    assert reads == [data]  # the second time from the index
    assert key_index.key_column(str(table_dir), data, "v").to_pylist() == ["a", "b", "c"]  # another column: not it
    assert len(reads) == 2
    with open(index, "r+b") as damaged:  # as a crash or a full disk elsewhere would leave it
        damaged.truncate(20)
    assert key_index.key_column(str(table_dir), data, "v").to_pylist() == ["a", "b", "c"]
    assert key_index.key_column(str(table_dir), data, "v").to_pylist() == ["a", "b", "c"]
    assert len(reads) == 3  # made again, then used

    outside = str(tmp_path / "elsewhere.parquet")  # (a Delta table may list absolute paths)
    pq.write_table(pa.table({"id": [1]}), outside)
    assert key_index.index_path(str(table_dir), outside) is None
    assert key_index.key_column(str(table_dir), outside, "id").to_pylist() == [1]

    Path(index + ".abc.tmp").write_bytes(b"left by a crash")
    assert key_index.prune(str(table_dir)) == 1 and Path(index).exists()  # the leftover only
    Path(data).unlink()  # VACUUM
    assert key_index.prune(str(table_dir)) == 1 and not Path(index).exists()
    assert key_index.prune(str(tmp_path / "nothing here")) == 0


@pytest.mark.parametrize("kind,stored,keys,by_table", [
    # integer keys in a compact range: looked up in a table indexed by key
    ("int64", [list(range(0, 3000, 3)), list(range(-50, 2000)), [2**62, -2**62, 7]],
     list(range(-10, 2500, 7)), True),
    ("int32", [list(range(100)), list(range(50, 300))], [5, 60, 299, 1000], True),
    # spread over far more values than 32 per key: a hash set
    ("int64", [[1, 10**12, 5, 2 * 10**12], list(range(100))], [10**12, 5, 99, 3 * 10**12], False),
    ("string", [["a", "b", "c"], ["c", "d", "é", ""]], ["", "c", "é", "zz"], False),
], ids=["int64-table", "int32-table", "int64-sparse", "text"])
def test_driver_search_marks_exactly_the_rows_holding_the_keys(tmp_path: Path, kind: str, stored: list[list],
                                                               keys: list, by_table: bool) -> None:
    """driver_marks' search against a plain membership test, over files read in several
    row groups (chunks), in one group of files and in several."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pgcdc.engines.fast import driver_marks

    paths = []
    for i, values in enumerate(stored):
        path = tmp_path / f"part-{i}.parquet"
        pq.write_table(pa.table({"k": pa.array(values, type=getattr(pa, kind)())}), path, row_group_size=64)
        paths.append(str(path))
    key_array = pa.array(keys, type=pa.int64() if kind.startswith("int") else pa.string())
    assert (driver_marks._key_table(key_array) is not None) == by_table
    for value_set in (key_array, pa.array(keys * 40, type=key_array.type)):  # many keys: one group of files
        masks = driver_marks._masks(str(tmp_path), paths, ["k"], pa.table({"k": value_set}))
        assert [m.to_pylist() for m in masks] == [[v in set(keys) for v in values] for values in stored]


def test_driver_search_of_a_composite_key_marks_exactly_the_rows_holding_the_keys(tmp_path: Path) -> None:
    """A two-column key (int32 and text stored, keys read as int64 and text): only rows whose
    every column matches one key, over several files with several row groups, from the
    Parquet files and then from their key indexes."""
    import random

    import pyarrow as pa
    import pyarrow.parquet as pq
    from pgcdc.engines.fast import driver_marks

    rng = random.Random(7)
    stored = [[(rng.randrange(40), rng.choice("abcd")) for _ in range(n)] for n in (300, 0, 130, 1)]
    paths = []
    for i, rows in enumerate(stored):
        path = tmp_path / f"part-{i}.parquet"
        pq.write_table(pa.table({"a": pa.array([r[0] for r in rows], pa.int32()),
                                 "b": pa.array([r[1] for r in rows], pa.string()),
                                 "v": pa.array([1] * len(rows), pa.int64())}), path, row_group_size=64)
        paths.append(str(path))
    keys = {(rng.randrange(45), rng.choice("abcde")) for _ in range(30)} | {(stored[3][0][0], "z")}
    wanted = pa.table({"a": pa.array([k[0] for k in keys], pa.int64()), "b": [k[1] for k in keys]})
    for _ in range(2):  # (the second time from the key indexes)
        masks = driver_marks._masks(str(tmp_path), paths, ["a", "b"], wanted)
        assert [m.to_pylist() for m in masks] == [[r in keys for r in rows] for rows in stored]
    assert any(any(m.to_pylist()) for m in masks) and not all(all(m.to_pylist()) for m in masks)


def test_compaction_is_due_once_a_table_has_enough_small_files() -> None:
    from pgcdc.lake.tablelog import LogState
    from pgcdc.sync.plan import SMALL_FILE, compact_reason

    small, big = 1_000, SMALL_FILE
    listed = LogState(3, all_files={f"f{i}": small for i in range(4)} | {"big": big})
    assert compact_reason(listed, 4) == "4 small files"
    assert compact_reason(listed, 5) is None  # (the big file does not count)
    assert compact_reason(listed, 0) is None  # 0: never
    counted = LogState(3, num_files=60, table_bytes=60 * small)  # a checksum without its file list
    assert compact_reason(counted, 40) == "60 small files"
    assert compact_reason(LogState(3, num_files=60, table_bytes=60 * big), 40) is None
    assert compact_reason(LogState(3), 1) is None  # no checksum: not judged


def test_a_second_signal_is_a_stop_at_once_even_where_the_interrupt_was_turned_into_another_error() -> None:
    """Py4J re-raises a KeyboardInterrupt in mid-answer, and the next JVM call then fails with
    Py4JNetworkError: the follower must still stop at once (exit 130), not treat a table as failed."""
    import signal

    from pgcdc.sync.follow import Stopper

    stop = Stopper()
    stop._handle(signal.SIGINT, None)
    assert stop() and not stop.at_once
    stop.raise_if_at_once()  # (the first signal: a stop after the batch in flight)
    with pytest.raises(KeyboardInterrupt):
        stop._handle(signal.SIGINT, None)
    with pytest.raises(KeyboardInterrupt):
        stop.raise_if_at_once()


def test_newest_version_of_a_local_log_follows_commits_and_a_table_made_again(tmp_path: Path) -> None:
    """The newest version is found from the one seen before (no listing), and stays right when
    the table is deleted, made again shorter or longer, or its old commits are cleaned up."""
    import shutil

    from pgcdc.lake.tablelog import latest_version

    log = tmp_path / "t" / "_delta_log"

    def commit(*versions: int) -> None:
        log.mkdir(parents=True, exist_ok=True)
        for v in versions:
            (log / f"{v:020d}.json").write_text("{}")
            (log / f"{v:020d}.crc").write_text("{}")

    path = str(tmp_path / "t")
    assert latest_version(None, path) == -1  # type: ignore[arg-type]
    commit(*range(6))
    assert latest_version(None, path) == 5  # type: ignore[arg-type]
    commit(*range(6, 10))
    (log / f"{7:020d}.checkpoint.parquet").write_text("")
    assert latest_version(None, path) == 9  # type: ignore[arg-type]
    for v in range(7):  # log cleanup
        (log / f"{v:020d}.json").unlink()
    commit(10)
    assert latest_version(None, path) == 10  # type: ignore[arg-type]
    shutil.rmtree(tmp_path / "t")
    assert latest_version(None, path) == -1  # type: ignore[arg-type]
    commit(*range(3))
    assert latest_version(None, path) == 2  # type: ignore[arg-type]
    shutil.rmtree(tmp_path / "t")
    commit(*range(13))
    assert latest_version(None, path) == 12  # type: ignore[arg-type]


def test_unapplied_counts_only_events_above_the_watermark_outside_the_out_of_order_set() -> None:
    """An idle pass counts what is left from rows it read before moving the watermark: rows the
    move swallowed (below the new watermark) are not pending."""
    from datetime import datetime, timezone

    from pgcdc.source.events import unapplied

    at = [datetime(2026, 1, 1, 0, 0, i, tzinfo=timezone.utc) for i in range(4)]
    base = ConsumerState("c", "public.t", 1, "sys", watermark=100, out_of_order=TxidSet.of([(105, 105)]), batch=3)
    rows = [(105, 2, at[0]), (112, 1, at[1]), (120, 4, at[2])]
    assert unapplied(rows, base) == (5, at[1])
    moved = base.passed(110)  # (as an idle pass moves it: 105 swallowed by the watermark)
    assert (moved.watermark, moved.out_of_order, moved.batch, moved.run_id) == (110, TxidSet(), 3, base.run_id)
    assert unapplied([(105, 2, at[0])], moved) == (0, None)
    assert unapplied(rows, moved) == (5, at[1])


def test_a_copy_state_round_trips_and_its_progress_reaches_the_metrics() -> None:
    from pgcdc.sync.metrics import Metrics
    from pgcdc.sync.progress import duration, eta_seconds
    from pgcdc.watermark import ConsumerState, CopyProgress

    state = ConsumerState("c", "public.t", 7, "sys/db", 100, batch=3,
                          copy=CopyProgress('{"k": 1}', 2, 600, 2000, 1.5)).chunk(CopyProgress("601", 3, 900, 2000, 1.5))
    back = ConsumerState.from_json(state.to_json())
    assert back == state and back.batch == 4 and back.copy == CopyProgress("601", 3, 900, 2000, 1.5)
    assert ConsumerState.from_json(back.chunk(None).to_json()).copy is None
    assert eta_seconds(900, 2000, 100.0) == 11.0 and eta_seconds(900, 0, 100.0) is None
    assert duration(11) == "11s" and duration(125) == "2m05s" and duration(3725) == "1h02m" and duration(None) == "unknown"
    metrics = Metrics()
    metrics.copy_progress("public.t", 0.45, None)
    assert metrics.registry.get_sample_value("pgcdc_copy_progress_ratio", {"table": "public.t"}) == 0.45
    assert metrics.registry.get_sample_value("pgcdc_copy_eta_seconds", {"table": "public.t"}) == -1.0
