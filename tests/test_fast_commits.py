"""The fast engine's commits are what Delta's own MERGE writes (issue: faithful commits): the
same batch applied by both engines to two copies of a table gives the same rows, the same
statistics for the new files, the same operation, parameters and metric names, and a
schema as PostgreSQL has it (key columns NOT NULL, no JDBC leftovers in field metadata).

Not in scripts/compat.sh: the fast engine runs only on the Delta build it was tested with.
The oracle reads the Delta logs as JSON files and PostgreSQL with psycopg."""

from __future__ import annotations

import json
import re
from pathlib import Path

import psycopg
import pytest

from pgcdc.source import capture
from fixtures.ingest import Syncer, driver_writes

_TABLE = """create table t (id bigint primary key, i int, n numeric(10, 2), d double precision, b boolean,
    s text, long text, uni text, day date, ts timestamptz, tsn timestamp, bin bytea, arr int[])"""
# long and non-ASCII strings (Delta truncates min/max to a 32-character prefix, whole
# surrogate pairs, with a tie-breaker on the max: U+007F or U+10FFFF), timestamps with microseconds (stats keep milliseconds), NaN
_ROW = """select i, i % 17 - 8, (i * 1.25)::numeric(10, 2), case when i % 50 = 0 then 'NaN' else i / 3.0 end,
    i % 2 = 0, 'v' || i, repeat(chr(100 + i % 20), 40) || chr(i % 3 + 255) || repeat('é', i % 5),
    case i % 3 when 0 then repeat(chr(233 + i % 5), 40) when 1 then repeat('x', 31) || '😀z' else repeat('😀', 20) end,
    date '2024-01-01' + i, timestamptz '2024-01-01 00:00:00.123456+00' + i * interval '1 hour 1 microsecond',
    timestamp '1999-12-31 23:59:59.999999' + i * interval '1 day', decode(lpad(to_hex(i), 4, '0'), 'hex'),
    array[i, i + 1] from generate_series({lo}, {hi}) i"""


def _latest(path: str) -> tuple[dict, list[dict]]:
    """The newest commit's commitInfo and the AddFiles of the data files it wrote (not the
    files it re-added with a deletion vector)."""
    log = Path(path, "_delta_log")
    version = max(int(p.stem) for p in log.glob("*.json"))
    actions = [json.loads(line) for line in (log / f"{version:020d}.json").read_text().splitlines()]
    info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
    return info, [a["add"] for a in actions if "add" in a and not a["add"].get("deletionVector")]


def _file_stats(adds: list[dict]) -> dict:
    """The new files' statistics taken together: their fields, row count, per-column min, max
    and null count (min/max compared as Delta's JSON gives them)."""
    stats = [json.loads(a["stats"]) for a in adds]
    fields = {(k, tuple(sorted(s[k]))) if isinstance(s[k], dict) else (k, None) for s in stats for k in s}
    out: dict = {"fields": sorted(fields), "numRecords": sum(s["numRecords"] for s in stats)}
    for kind, pick in (("minValues", min), ("maxValues", max)):
        columns = {c for s in stats for c in s.get(kind, {})}
        out[kind] = {c: pick((s[kind][c] for s in stats if c in s.get(kind, {})), key=_order) for c in columns}
    out["nullCount"] = {c: sum(s["nullCount"].get(c, 0) for s in stats) for c in stats[0]["nullCount"]}
    return out


def _order(value: object) -> tuple:
    """Spark's order of statistics values: NaN above every number, strings by their UTF-8 bytes."""
    if value == "NaN":
        return (1, 0)
    return (0, value.encode("utf-8", "surrogatepass") if isinstance(value, str) else value)


def _schema(path: str) -> list[dict]:
    log = Path(path, "_delta_log")
    metadata = None
    for p in sorted(log.glob("*.json")):
        for line in p.read_text().splitlines():
            if "metaData" in (action := json.loads(line)):
                metadata = action["metaData"]
    assert metadata is not None
    return json.loads(metadata["schemaString"])["fields"]


# the batch's rows written by the driver; by Spark (old rows found by the driver); all by Spark
@pytest.mark.parametrize("writer", ["driver", "spark", "spark-join"])
def test_fast_and_merge_engines_commit_the_same_batch_alike(db: psycopg.Connection, dsn: str, spark, tmp_path: Path,
                                                            monkeypatch, writer: str) -> None:
    db.execute(_TABLE)
    db.execute("insert into t " + _ROW.format(lo=1, hi=400))
    capture.attach(db, "t")
    fast, merge = Syncer(spark, dsn, tmp_path / "fast"), Syncer(spark, dsn, tmp_path / "merge")
    paths = {"small_batch_keys": 10_000 if writer == "driver" else 1, "driver_keys": 1 if writer == "spark-join" else 10_000}
    fast.run(consumer="f", engine="fast", **paths)
    merge.run(consumer="m", engine="merge")
    db.execute("update t set s = s || '!', ts = ts + interval '1 second' where id % 3 = 0")
    db.execute("update t set d = 'NaN' where id = 9")
    db.execute("delete from t where id % 7 = 0")
    db.execute("insert into t " + _ROW.format(lo=1000, hi=1030))
    db.execute("insert into t (id) values (2000)")  # nulls in every other column

    wrote = driver_writes(monkeypatch)
    fast.run(consumer="f", engine="fast", **paths)
    merge.run(consumer="m", engine="merge")
    assert wrote == ([1] if writer == "driver" else [])
    for syncer in (fast, merge):
        syncer.assert_equal("public.t")

    (fast_info, fast_adds), (merge_info, merge_adds) = _latest(fast.path("public.t")), _latest(merge.path("public.t"))
    assert fast_info["operation"] == merge_info["operation"] == "MERGE"
    # the same predicates, but for the expression ids of Spark's plan (id#1673L)
    assert fast_info["operationParameters"] == {k: re.sub(r"#\d+L?", "", v)
                                                for k, v in merge_info["operationParameters"].items()}
    assert sorted(fast_info["operationMetrics"]) == sorted(merge_info["operationMetrics"])
    for name in ("numSourceRows", "numTargetRowsInserted", "numTargetRowsUpdated", "numTargetRowsDeleted",
                 "numOutputRows", "numTargetRowsCopied"):
        assert fast_info["operationMetrics"][name] == merge_info["operationMetrics"][name], name
    assert int(fast_info["operationMetrics"]["numTargetBytesAdded"]) == sum(a["size"] for a in fast_adds)
    assert _file_stats(fast_adds) == _file_stats(merge_adds)

    for syncer in (fast, merge):
        fields = _schema(syncer.path("public.t"))
        assert [f["name"] for f in fields if not f["nullable"]] == ["id"]
        assert [f["name"] for f in fields if f["metadata"]] == []

    # the next batch's metrics are its own (the fast engine keeps its metric objects between commits)
    db.execute("delete from t where id in (1, 2)")
    db.execute("update t set i = i + 1 where id = 3")
    fast.run(consumer="f", engine="fast", **paths)
    metrics = _latest(fast.path("public.t"))[0]["operationMetrics"]
    assert [metrics[name] for name in ("numSourceRows", "numTargetRowsDeleted", "numTargetRowsUpdated",
                                       "numTargetRowsInserted")] == ["3", "2", "1", "0"]
    fast.assert_equal("public.t")


def test_driver_statistics_equal_what_delta_writes(spark, tmp_path: Path) -> None:
    """file_stats.collect on the edge values of each type gives what Delta's own writer
    stores for the same rows in one file (read back from the log)."""
    import datetime as dt
    from decimal import Decimal

    import pyarrow as pa
    from pyspark.sql import types as T
    from pyspark.sql.pandas.types import to_arrow_type

    from pgcdc.engines.fast import file_stats

    top = "\U0010ffff"
    schema = T.StructType([
        T.StructField("id", T.LongType(), False), T.StructField("short", T.ShortType()),
        T.StructField("exact", T.StringType()), T.StructField("tops", T.StringType()),
        T.StructField("pair", T.StringType()), T.StructField("nan", T.DoubleType()), T.StructField("inf", T.DoubleType()),
        T.StructField("dec", T.DecimalType(38, 18)), T.StructField("day", T.DateType()),
        T.StructField("ts", T.TimestampType()), T.StructField("ntz", T.TimestampNTZType()),
        T.StructField("flag", T.BooleanType()), T.StructField("raw", T.BinaryType()),
        T.StructField("arr", T.ArrayType(T.StringType())), T.StructField("empty", T.StringType())])
    utc = dt.timezone.utc
    rows = [
        (1, -3, "a" * 32, top * 40, "b" * 31 + "😀" + "c", float("nan"), float("inf"), Decimal("1E-18"),
         dt.date(1, 1, 1), dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=utc), dt.datetime(1, 1, 1),
         True, b"\x00", ["x"], None),
        (2, 7, "a" * 33, "z" * 31 + top * 3 + "a", "😀" * 17, float("nan"), float("-inf"), Decimal("-12.5"),
         dt.date(9999, 12, 31), dt.datetime(2024, 2, 29, 12, 0, 0, 1, tzinfo=utc), dt.datetime(9999, 12, 31, 23, 59, 59),
         None, None, None, None),
        (3, None, "é" * 40, "z" * 31 + "é", "", float("nan"), -0.0, None, None, None, None, False, b"\xff", [], None),
    ]
    path = str(tmp_path / "t")
    spark.sql(f"create table delta.`{path}` ({', '.join(f'`{f.name}` {f.dataType.simpleString()}' for f in schema)}) "
              "using delta tblproperties ('delta.enableDeletionVectors' = 'true')")
    spark.createDataFrame(rows, schema).coalesce(1).write.format("delta").mode("append").save(path)
    _, adds = _latest(path)
    assert len(adds) == 1
    table = pa.Table.from_arrays([pa.array([r[i] for r in rows], type=to_arrow_type(f.dataType))
                                  for i, f in enumerate(schema.fields)], names=schema.names)
    ours = file_stats.collect(table, {}, "UTC", 32)
    assert ours is not None
    assert json.loads(ours) == json.loads(adds[0]["stats"])
    assert file_stats.collect(table, {"delta.dataSkippingNumIndexedCols": "3"}, "UTC", 32) is not None
    assert set(json.loads(file_stats.collect(table, {"delta.dataSkippingNumIndexedCols": "3"}, "UTC", 32)
                          )["nullCount"]) == {"id", "short", "exact"}
    assert file_stats.collect(table, {}, "Europe/Paris", 32) is None  # left to Spark's writer

    # dates and timestamps past Python's (BC, past 9999): built from day and microsecond counts
    days, micros = [-2440588, -719529, 2932897, 2145031948], [-210866760000000000 + 1, 6311390400000000000 - 1]
    edge = str(tmp_path / "edge")
    spark.sql(f"create table delta.`{edge}` (d date, ts timestamp, ntz timestamp_ntz) using delta "
              "tblproperties ('delta.enableDeletionVectors' = 'true')")
    spark.sql(" union all ".join(f"select date_from_unix_date({d}) d, timestamp_micros({m}) ts, "
                                 f"cast(timestamp_micros({m}) as timestamp_ntz) ntz"
                                 for d, m in zip(days, micros + micros))).coalesce(1).write.format("delta") \
        .mode("append").save(edge)
    _, adds = _latest(edge)
    table = pa.table({"d": pa.array(days, pa.int32()).cast(pa.date32()),
                      "ts": pa.array(micros + micros, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
                      "ntz": pa.array(micros + micros, pa.int64()).cast(pa.timestamp("us"))})
    assert json.loads(file_stats.collect(table, {}, "UTC", 32) or "{}") == json.loads(adds[0]["stats"])
