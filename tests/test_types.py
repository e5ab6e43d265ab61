"""docs/types.md, row by row: every PostgreSQL type lands in Delta as the table says, through
the first copy and through incremental batches written by the driver and by Spark; values
no Delta type holds are refused naming the table, column and row, and only that table stops.

The oracle is the table below (expected values worked out here, in Python, from the
calendar and IEEE arithmetic), compared with the Delta table as a plain Spark session reads it.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import psycopg
import pytest

from pgcdc.source import capture

from fixtures.ingest import driver_writes


def days(y: int, m: int, d: int) -> int:
    """Days from 1970-01-01 to y-m-d in the proleptic Gregorian calendar (astronomical years:
    44 BC is -43), as PostgreSQL counts them (H. Hinnant's days_from_civil)."""
    y -= m <= 2
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    return era * 146097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719468


def micros(y: int, m: int, d: int, hh: int = 0, mm: int = 0, ss: int = 0, us: int = 0) -> int:
    return ((days(y, m, d) * 24 + hh) * 60 + mm) * 60_000_000 + ss * 1_000_000 + us


def f32(x: float) -> float:
    return struct.unpack("f", struct.pack("f", x))[0]


@dataclass(frozen=True)
class TypeRow:
    """One row of docs/types.md: a PostgreSQL type, its Delta type, and (SQL literal, value
    Delta must hold) pairs; dates as days and timestamps as microseconds since 1970 (UTC)."""

    pg: str
    delta: str
    values: list[tuple[str, Any]]
    driver: bool = True  # False: the driver writer steps aside for it (Spark writes it)


TYPES = [
    TypeRow("smallint", "smallint", [("-32768", -32768), ("32767", 32767)]),
    TypeRow("integer", "int", [("-2147483648", -2147483648), ("0", 0)]),
    TypeRow("bigint", "bigint", [("9223372036854775807", 9223372036854775807), ("-1", -1)]),
    TypeRow("real", "float", [("1.1", f32(1.1)), ("'NaN'", math.nan), ("3.4028235e38", f32(3.4028235e38)),
                              ("'-Infinity'", -math.inf)], driver=False),
    TypeRow("double precision", "double", [("0.1", 0.1), ("'NaN'", math.nan), ("1e308", 1e308),
                                           ("'-Infinity'", -math.inf), ("'-0'", -0.0)]),
    TypeRow("boolean", "boolean", [("true", True), ("false", False)]),
    TypeRow("text", "string", [("'tëxt'", "tëxt"), ("''", ""), ("E'it''s \"q\" \\\\ \\n'", "it's \"q\" \\ \n")]),
    TypeRow("varchar(5)", "string", [("'abc'", "abc")]),
    TypeRow("char(5)", "string", [("'ab'", "ab   ")]),  # as PostgreSQL stores and prints it: blank-padded
    TypeRow("bytea", "binary", [("'\\x00ff10'", b"\x00\xff\x10"), ("''", b"")]),
    TypeRow("numeric(10,2)", "decimal(10,2)", [("12345678.90", Decimal("12345678.90")), ("-0.01", Decimal("-0.01")),
                                               ("'NaN'", None)]),
    TypeRow("numeric(45,10)", "string", [("12345678901234567890123456789012345.5",
                                          "12345678901234567890123456789012345.5000000000"), ("'NaN'", "NaN")]),
    TypeRow("numeric", "decimal(38,18)", [("1.5", Decimal("1.5")), ("1/3::numeric", Decimal("0.333333333333333333")),
                                          ("2/3::numeric", Decimal("0.666666666666666667")),
                                          ("-99999999999999999999.999999999999999999",
                                           Decimal("-99999999999999999999.999999999999999999")),
                                          ("'NaN'", None), ("'Infinity'", None), ("'-Infinity'", None)]),
    TypeRow("date", "date", [("'2024-02-29'", days(2024, 2, 29)), ("'0044-03-15 BC'", days(-43, 3, 15)),
                             ("'1582-10-10'", days(1582, 10, 10)), ("'20000-01-01'", days(20000, 1, 1)),
                             ("'5874897-12-31'", days(5874897, 12, 31)), ("'4713-11-24 BC'", days(-4712, 11, 24)),
                             ("'infinity'", None), ("'-infinity'", None)]),
    TypeRow("timestamp", "timestamp_ntz", [
        ("'2024-02-29 12:34:56.789'", micros(2024, 2, 29, 12, 34, 56, 789000)),
        ("'0044-03-15 12:00 BC'", micros(-43, 3, 15, 12)), ("'1582-10-10 10:00'", micros(1582, 10, 10, 10)),
        ("'294246-12-31 23:59:59.999999'", micros(294246, 12, 31, 23, 59, 59, 999999)),
        ("'infinity'", None), ("'-infinity'", None), ("'294276-12-31 00:00'", None)]),
    TypeRow("timestamptz", "timestamp", [
        ("'2024-02-29 12:34:56+05'", micros(2024, 2, 29, 7, 34, 56)), ("'1500-01-01 00:00+00'", micros(1500, 1, 1)),
        ("'0044-03-15 12:00+00 BC'", micros(-43, 3, 15, 12)), ("'200000-01-01 00:00+00'", micros(200000, 1, 1)),
        ("'-infinity'", None), ("'infinity'", None)]),
    TypeRow("integer[]", "array<int>", [("'{1,NULL,3}'", [1, None, 3]), ("'{}'", [])]),
    TypeRow("text[]", "array<string>", [("'{\"a b\",NULL,\"\"}'", ["a b", None, ""])]),
    TypeRow("double precision[]", "array<double>", [("'{1.5,-2}'", [1.5, -2.0])]),
    TypeRow("boolean[]", "array<boolean>", [("'{t,f}'", [True, False])]),
    TypeRow("date[]", "array<date>", [("'{2024-01-01,infinity,NULL}'", [days(2024, 1, 1), None, None])]),
    TypeRow("timestamptz[]", "array<timestamp>", [("'{\"2024-01-01 00:00+00\",infinity}'",
                                                   [micros(2024, 1, 1), None])]),
    TypeRow("numeric[]", "array<string>", [("'{1.50,NaN}'", ["1.50", "NaN"])]),
    TypeRow("uuid", "string", [("'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11'", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11")]),
    TypeRow("jsonb", "string", [("'{\"b\": 1, \"a\": [1, 2.50]}'", '{"a": [1, 2.50], "b": 1}')]),
    TypeRow("json", "string", [("'{\"b\":1,  \"a\":2}'", '{"b":1,  "a":2}')]),
    TypeRow("mood", "string", [("'happy'", "happy")]),
    TypeRow("interval", "string", [("'1 day 2 hours 3.5 seconds'", "1 day 02:00:03.5")]),
    TypeRow("time", "string", [("'12:34:56.789'", "12:34:56.789")]),
    TypeRow("timetz", "string", [("'12:34:56+05'", "12:34:56+05")]),
    TypeRow("inet", "string", [("'192.168.0.1/24'", "192.168.0.1/24")]),
    TypeRow("int4range", "string", [("'[1,10)'", "[1,10)")]),
    TypeRow("bit(4)", "string", [("B'1010'", "1010")]),
    TypeRow("pair", "string", [("'(1,\"x y\")'", '(1,"x y")')]),
]


def _probe(column: str, delta_type: str) -> str:
    """Spark SQL reading a Delta column as the values above: dates as days, timestamps as
    microseconds since 1970 (the session's time zone is UTC)."""
    ref = f"`{column}`"
    if delta_type in ("date", "array<date>"):
        return f"transform({ref}, e -> unix_date(e))" if delta_type.startswith("array") else f"unix_date({ref})"
    if delta_type in ("timestamp", "array<timestamp>"):
        return f"transform({ref}, e -> unix_micros(e))" if delta_type.startswith("array") else f"unix_micros({ref})"
    if delta_type == "timestamp_ntz":
        return f"unix_micros(cast({ref} as timestamp))"
    return ref


def _same(got: Any, want: Any) -> bool:
    if isinstance(want, float) and isinstance(got, float):
        return (math.isnan(want) and math.isnan(got)) or (got == want and math.copysign(1, got) == math.copysign(1, want))
    if isinstance(want, bytes):
        return got is not None and bytes(got) == want
    return got == want


def _create(db: psycopg.Connection, name: str, rows: list[TypeRow]) -> None:
    db.execute("create type mood as enum ('sad', 'happy')")
    db.execute("create type pair as (a int, b text)")
    cols = ", ".join(f"c{i} {r.pg}" for i, r in enumerate(rows))
    db.execute(f"create table {name} (id int primary key, {cols})")


def _fill(db: psycopg.Connection, name: str, rows: list[TypeRow], update: bool) -> int:
    """Row n holds each type's n-th value (null past its last); the last row is all null."""
    count = max(len(r.values) for r in rows) + 1
    for n in range(count):
        values = [r.values[n][0] if n < len(r.values) else "null" for r in rows]
        if update:
            sets = ", ".join(f"c{i} = {v}" for i, v in enumerate(values))
            db.execute(f"update {name} set {sets} where id = {n}")
        else:
            db.execute(f"insert into {name} values ({n}, {', '.join(values)})")
    return count


def _check(spark: Any, path: str, rows: list[TypeRow], count: int) -> None:
    delta = spark.read.format("delta").load(path)
    types = {f.name: f.dataType.simpleString() for f in delta.schema.fields}
    wrong_types = {r.pg: types[f"c{i}"] for i, r in enumerate(rows) if types[f"c{i}"] != r.delta}
    assert not wrong_types, f"Delta types differ from docs/types.md: {wrong_types}"
    got = {row.id: row for row in delta.selectExpr("id", *[f"{_probe(f'c{i}', r.delta)} as c{i}"
                                                           for i, r in enumerate(rows)]).collect()}
    assert sorted(got) == list(range(count))
    wrong = []
    for i, r in enumerate(rows):
        for n in range(count):
            literal, want = r.values[n] if n < len(r.values) else ("null", None)
            value = got[n][f"c{i}"]
            same = (value is None and want is None) or (
                isinstance(want, list) and value is not None and len(value) == len(want)
                and all(_same(g, w) for g, w in zip(value, want))) or _same(value, want)
            if not same:
                wrong.append(f"{r.pg} {literal}: Delta holds {value!r}, docs/types.md says {want!r}")
    assert not wrong, "\n".join(wrong)


WAYS = ["first copy", "first copy written by the driver", "batch written by the driver", "batch written by Spark",
        "batch applied by the merge engine"]


def _engine(way: str) -> dict[str, object]:
    """The ingest settings of a way a value travels."""
    if way == "batch applied by the merge engine":
        return {"engine": "merge"}
    return {"small_batch_keys": 100_000 if way == "batch written by the driver" else 1}


@pytest.mark.parametrize("way", WAYS)
def test_every_type_lands_as_the_type_table_says(db: psycopg.Connection, syncer, monkeypatch, way: str) -> None:
    assert syncer.spark.conf.get("spark.sql.session.timeZone") == "UTC"  # (the probes' micros of timestamp_ntz)
    wrote = driver_writes(monkeypatch)
    by_driver = way.endswith("written by the driver")
    rows = [r for r in TYPES if r.driver or not by_driver]
    _create(db, "t", rows)
    if way.startswith("first copy"):
        count = _fill(db, "t", rows, update=False)
        capture.attach(db, "t")
        assert syncer.run()["public.t"].copied == count
        assert wrote == ([1] if by_driver else [])  # (every type at once: some only Spark copies)
    else:
        # first as nulls, copied; then every value arrives in one batch of updates
        count = max(len(r.values) for r in rows) + 1
        db.execute(f"insert into t (id) select generate_series(0, {count - 1})")
        capture.attach(db, "t")
        syncer.run()
        wrote.clear()  # (the copy of nulls)
        _fill(db, "t", rows, update=True)
        report = syncer.run(**_engine(way))["public.t"]
        assert report.upserted == count
        assert wrote == ([1] if way == "batch written by the driver" else [])
    _check(syncer.spark, syncer.path("public.t"), rows, count)


REFUSED = [
    ("integer[]", "'{{1,2},{3,4}}'", "Delta arrays are one-dimensional"),
    ("integer[]", "'[0:1]={1,2}'", "start at 1"),
    ("numeric", "1e25", "holds at most 20 digits before the point"),
    ("date[]", "'{{2024-01-01}}'", "Delta arrays are one-dimensional"),
]


@pytest.mark.parametrize("way", WAYS)
def test_values_no_delta_type_holds_stop_only_their_table_naming_column_and_row(db: psycopg.Connection, syncer,
                                                                               way: str) -> None:
    """One table per refused value, beside a good one: each bad table fails alone, its line
    names the column, the row's key and why; the good table syncs; once fixed, all sync."""
    bad = [f"bad{i}" for i in range(len(REFUSED))]
    for name, (pg_type, _, _) in zip(bad, REFUSED):
        db.execute(f"create table {name} (id int primary key, v {pg_type})")
        db.execute(f"insert into {name} values (1, null), (2, null)")
    db.execute("create table good (id int primary key, v text)")

    def spoil() -> None:
        for name, (_, literal, _) in zip(bad, REFUSED):
            db.execute(f"update {name} set v = {literal} where id = 2")
    if way == "first copy":
        spoil()
    for name in bad + ["good"]:
        capture.attach(db, name)
    if way != "first copy":
        syncer.run()
        spoil()
    db.execute("insert into good values (1, 'synced')")
    with pytest.raises(Exception, match="pgcdc: column v of public.bad0 holds"):
        syncer.run(**_engine(way))
    said = "\n".join(syncer.lines)
    for name, (_, _, why) in zip(bad, REFUSED):
        line = next(x for x in syncer.lines if x.startswith(f"public.{name}: FAILED: "))
        assert line.startswith(f"public.{name}: FAILED: PostgreSQL: pgcdc: column v of public.{name} holds "), said
        assert "in the row with key 2" in line and why in line, line
    assert [r.v for r in syncer.delta("public.good").collect()] == ["synced"]  # the other table synced
    with psycopg.connect(syncer.dsn) as conn:
        error = conn.execute("select error from pgcdc.consumer_run").fetchone()[0]
    assert f"{len(bad)} of {len(bad) + 1} table(s) failed" in error and "column v of public.bad0" in error

    for name in bad:  # once the value is fixed, the table syncs again
        db.execute(f"update {name} set v = null where id = 2")
    syncer.run()
    for name in bad:
        assert sorted((r.id, r.v) for r in syncer.delta(f"public.{name}").collect()) == [(1, None), (2, None)]


@pytest.mark.parametrize("pg_type,literal", [("date", "'infinity'"), ("numeric(5,1)", "'NaN'"),
                                             ("timestamptz", "'-infinity'")])
def test_a_key_is_never_null_its_infinity_or_nan_is_refused(db: psycopg.Connection, syncer, pg_type: str,
                                                           literal: str) -> None:
    db.execute(f"create table k (id {pg_type} primary key, v int)")
    capture.attach(db, "k")
    syncer.run()
    db.execute(f"insert into k values ({literal}, 1)")
    with pytest.raises(Exception, match="a key must land exactly"):
        syncer.run()
    assert syncer.delta("public.k").count() == 0


@pytest.mark.parametrize("pg_type,first", [("date", "date '2024-01-01'"), ("timestamp", "timestamp '2024-01-01'"),
                                           ("timestamptz", "timestamptz '2024-01-01 00:00+00'")])
def test_rows_keyed_by_a_date_or_time_are_deleted_and_rekeyed(db: psycopg.Connection, syncer, pg_type: str,
                                                             first: str) -> None:
    """A gone row's key columns read null beside its key: not a value to refuse (the check of a
    date or time key once stopped every batch that deleted a row)."""
    db.execute(f"create table k (at {pg_type} primary key, v int)")
    db.execute(f"insert into k select {first} + g * interval '1 day', g from generate_series(1, 20) g")
    capture.attach(db, "k")
    syncer.run()
    db.execute(f"delete from k where at = {first} + interval '3 days'")
    db.execute("update k set at = at + interval '100 days' where v = 5")
    syncer.run()
    got = {r.v for r in syncer.delta("public.k").collect()}
    assert got == set(range(1, 21)) - {3} and syncer.delta("public.k").count() == 19
    syncer.assert_equal("public.k")


def test_verify_agrees_with_the_type_table_and_sees_a_value_changed_on_the_way(db: psycopg.Connection,
                                                                              syncer) -> None:
    """verify reads both sides with code of its own (not the sync's mapping): every type
    lands equal; a Delta value moved to a plausible one (infinity as 9999-12-31, a date a
    day off, a float's last bit) is DIFFERENT, naming the row."""
    from pgcdc.checks import verify
    from pgcdc.sync.ingest import Job
    from pgcdc.sync.runs import resync_tables

    _create(db, "t", TYPES)
    count = _fill(db, "t", TYPES, update=False)
    capture.attach(db, "t")
    syncer.run()
    (t,) = capture.list_attached(db)
    same = verify.compare(syncer.spark, db, t, syncer.path("public.t"))
    assert same.equal and same.postgres_rows == same.delta_rows == count, same.line()
    date_col = f"c{next(i for i, r in enumerate(TYPES) if r.pg == 'date')}"
    double_col = f"c{next(i for i, r in enumerate(TYPES) if r.pg == 'double precision')}"
    infinity_row = next(n for n, (lit, _) in enumerate(TYPES[int(date_col[1:])].values) if lit == "'infinity'")
    for column, change, row in [(date_col, "date'9999-12-31'", infinity_row),
                                (date_col, f"date_add({date_col}, 1)", 0),
                                (double_col, "0.30000000000000004", 0)]:  # (PostgreSQL holds 0.1)
        syncer.spark.sql(f"update delta.`{syncer.path('public.t')}` set {column} = {change} where id = {row}")
        found = verify.compare(syncer.spark, db, t, syncer.path("public.t"))
        assert (found.only_in_postgres, found.only_in_delta) == (1, 1), found.line()
        assert found.examples[0].startswith(f"{row} ({column}: PostgreSQL ") and "DIFFERENT" in found.line()
        resync_tables(Job(syncer.settings(), syncer.spark, syncer.lines.append), ["t"])
        assert verify.compare(syncer.spark, db, t, syncer.path("public.t")).equal


def test_verify_finds_rows_missing_extra_and_changed_under_a_composite_key(db: psycopg.Connection, syncer) -> None:
    """Keys that are not one integer are bucketed by a hash of their canonical text."""
    from pgcdc.checks import verify

    db.execute("create table c (region text, n numeric, v text, primary key (region, n))")
    db.execute("insert into c select 'r' || (i % 7), i / 4.0, 'v' || i from generate_series(1, 3000) i")
    capture.attach(db, "c")
    syncer.run()
    (t,) = capture.list_attached(db)
    assert verify.compare(syncer.spark, db, t, syncer.path("public.c")).equal
    db.execute("alter table c disable trigger user")  # changes the sync does not see
    db.execute("update c set v = 'changed' where n = 2.5")
    db.execute("delete from c where n = 3")
    db.execute("insert into c values ('new', 1, 'x')")
    db.execute("alter table c enable trigger user")
    found = verify.compare(syncer.spark, db, t, syncer.path("public.c"))
    assert (found.postgres_rows, found.delta_rows, found.only_in_postgres, found.only_in_delta) == (3000, 3000, 2, 2)
    assert sorted(found.examples) == ["new/1 (only in PostgreSQL)", "r3/2.5 (v: PostgreSQL changed vs Delta v10)",
                                      "r5/3 (only in Delta)"], found.examples
