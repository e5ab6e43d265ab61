"""The ingest job end to end: real PostgreSQL, real Spark + Delta; Delta must equal PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from pgcdc.source import capture

from fixtures.ingest import driver_writes


def test_first_sync_then_inserts_updates_deletes(db: psycopg.Connection, syncer) -> None:
    db.execute("create table t (id bigint primary key, name text, amount numeric(10,2))")
    db.execute("insert into t select i, 'n' || i, i * 1.5 from generate_series(1, 50) i")
    capture.attach(db, "t")
    first = syncer.run()["public.t"]
    assert first.copied == 50
    syncer.assert_equal("public.t")

    db.execute("insert into t values (100, 'new', 1)")
    db.execute("update t set name = 'changed' where id <= 5")
    db.execute("delete from t where id between 10 and 14")
    report = syncer.run()["public.t"]
    assert (report.events, report.upserted, report.deleted, report.pending_events) == (3, 6, 5, 0)
    syncer.assert_equal("public.t")
    assert syncer.delta("public.t").count() == 46
    from delta.tables import DeltaTable
    last = DeltaTable.forPath(syncer.spark, syncer.path("public.t")).history(1).collect()[0]
    assert last.operationMetrics["numTargetFilesAdded"] == "1"  # a small batch: one read, one new file


def _writer(dsn: str) -> psycopg.Connection:
    return psycopg.connect(dsn, autocommit=True)


def test_key_changes_composite_and_uuid_keys(db: psycopg.Connection, syncer) -> None:
    db.execute("create table c (region text, n int, v text, primary key (region, n))")
    db.execute("create table u (id uuid primary key default gen_random_uuid(), v text)")
    db.execute("insert into c values ('eu', 1, 'a'), ('us', 2, 'b'), ('it''s, \"x\"', 3, 'c')")
    db.execute("insert into u (v) select 'v' || i from generate_series(1, 5) i")
    capture.attach(db, "c")
    capture.attach(db, "u")
    syncer.run()
    db.execute("update c set n = n + 10 where region = 'eu'")  # key change: old key deleted, new inserted
    db.execute("update c set region = 'asia' where n = 3")
    db.execute("update u set id = gen_random_uuid() where v = 'v1'")
    db.execute("delete from u where v = 'v2'")
    db.execute("insert into c values ('eu', 1, 'reused old key')")
    syncer.run()
    syncer.assert_equal("public.c")
    syncer.assert_equal("public.u")
    assert sorted((r.region, r.n) for r in syncer.delta("public.c").collect()) == [
        ("asia", 3), ("eu", 1), ("eu", 11), ("us", 2)]


@pytest.mark.parametrize("small_batch_keys", [100_000, 1], ids=["driver writes the rows", "Spark writes the rows"])
def test_every_listed_type_round_trips(db: psycopg.Connection, syncer, monkeypatch, small_batch_keys: int) -> None:
    wrote = driver_writes(monkeypatch)
    db.execute("create type mood as enum ('sad', 'happy')")
    db.execute("""create table t (
        id int primary key, i2 smallint, i8 bigint, n numeric(12,3), big numeric(60,30), txt text, vc varchar(10),
        b boolean, d date, ts timestamp, tstz timestamptz, u uuid, j jsonb, ints int[], texts text[],
        raw bytea, m mood, f float8)""")
    capture.attach(db, "t")
    syncer.run()
    db.execute("""insert into t values (
        1, 7, 9223372036854775807, 123456789.123, 123456789012345678901234567890.123456789012345678901234,
        'tëxt', 'short', true, '2024-02-29', '2024-02-29 12:34:56.789', '2024-02-29 12:34:56+05',
        '00000000-0000-0000-0000-00000000000a', '{"a": [1, 2.5, null]}', '{1,2,3}', '{"a b",NULL}',
        '\\x00ff10', 'happy', 1.5)""")
    db.execute("insert into t (id) values (2)")
    db.execute("insert into t (id, d, ts, tstz) values (3, '0900-03-01', '1200-06-15 10:00', '1500-01-01 00:00+00')")
    syncer.run(small_batch_keys=small_batch_keys)
    syncer.assert_equal("public.t")
    # files the driver wrote read as Spark's do, whatever the reader's calendar rebase setting
    syncer.spark.conf.set("spark.sql.parquet.datetimeRebaseModeInRead", "LEGACY")
    try:
        syncer.assert_equal("public.t")
    finally:
        syncer.spark.conf.unset("spark.sql.parquet.datetimeRebaseModeInRead")
    assert wrote == ([1] if small_batch_keys > 1 else [])
    row = syncer.delta("public.t").where("id = 1").collect()[0]
    from datetime import date, datetime
    from decimal import Decimal

    assert row.i8 == 9223372036854775807 and row.n == Decimal("123456789.123")
    assert row.big == "123456789012345678901234567890.123456789012345678901234000000"  # > 38 digits: exact text
    assert (row.txt, row.vc, row.b, row.d) == ("tëxt", "short", True, date(2024, 2, 29))
    assert row.ts == datetime(2024, 2, 29, 12, 34, 56, 789000)  # timestamp without time zone: as written
    assert row.tstz == datetime(2024, 2, 29, 7, 34, 56) or row.tstz.isoformat().startswith("2024-02-29")
    assert row.u == "00000000-0000-0000-0000-00000000000a" and row.m == "happy"
    assert row.j == '{"a": [1, 2.5, null]}'
    assert (row.ints, row.texts, bytes(row.raw), row.f) == ([1, 2, 3], ["a b", None], b"\x00\xff\x10", 1.5)


def test_rows_the_driver_cannot_write_as_spark_would_go_to_spark(db: psycopg.Connection, syncer, monkeypatch) -> None:
    """The driver writer steps aside for a float4 column (its text form read as a double
    could round differently), a CHECK constraint on the Delta table (Delta's writer
    enforces it), and rows too large for the driver's memory (by the table's average row
    size); it writes timestamps past year 9999 (which travel as numbers, see docs/types.md)."""
    from pgcdc.source import enrich
    from pgcdc.errors import TargetError

    wrote = driver_writes(monkeypatch)
    db.execute("create table f4 (id int primary key, r real)")
    db.execute("create table far (id int primary key, ts timestamp)")
    db.execute("create table ok (id int primary key, v text)")
    for name in ("f4", "far", "ok"):
        capture.attach(db, name)
    syncer.run()
    db.execute("insert into f4 values (1, 1.1), (2, 3.4028235e38)")
    db.execute("insert into far values (1, '10000-01-01 00:00:00'), (2, '2024-01-01')")
    db.execute("insert into ok values (1, 'fine')")
    syncer.run()
    assert wrote == [1, 1]  # tables far and ok
    syncer.assert_equal("public.f4")
    delta, pg = syncer.delta("public.far"), syncer.postgres("public.far")  # year 10000: no Python datetime
    assert delta.count() == 2 and delta.exceptAll(pg).count() == 0 and pg.exceptAll(delta).count() == 0
    syncer.assert_equal("public.ok")

    monkeypatch.setattr(enrich, "DRIVER_ROWS_BYTES", 1000)  # rows this wide would not fit: Spark reads them
    db.execute("update ok set v = repeat('x', 2000)")
    db.execute("analyze ok")
    syncer.run(tables=["public.ok"])
    assert wrote == [1, 1]
    syncer.assert_equal("public.ok")
    monkeypatch.undo()
    wrote = driver_writes(monkeypatch)

    syncer.spark.sql(f"alter table delta.`{syncer.path('public.ok')}` add constraint no_bad check (v <> 'bad')")
    db.execute("insert into ok values (2, 'bad')")
    before = syncer.commits("public.ok")
    with pytest.raises(Exception, match="no_bad") as failed:
        syncer.run(tables=["public.ok"])
    assert not isinstance(failed.value, TargetError) and wrote == []
    assert syncer.commits("public.ok") == before  # Delta's writer refused the row; nothing committed


def test_long_transaction_strict_waits_out_of_order_does_not(db: psycopg.Connection, syncer, dsn: str,
                                                            tmp_path) -> None:
    from fixtures.ingest import Syncer

    db.execute("create table t (id int primary key, v text)")
    capture.attach(db, "t")
    strict = Syncer(syncer.spark, dsn, tmp_path / "strict")
    strict.run(consumer="strict", mode="strict")
    syncer.run(consumer="ooo")
    with _writer(dsn) as long_tx, _writer(dsn) as other:
        long_tx.execute("begin")
        long_tx.execute("insert into t values (1, 'long')")  # open: holds txmin back
        other.execute("insert into t values (2, 'quick')")
        other.execute("update t set v = 'quick2' where id = 2")
        s = strict.run(consumer="strict", mode="strict")["public.t"]
        o = syncer.run(consumer="ooo")["public.t"]
        assert (s.events, s.pending_events) == (0, 2)  # strict waits for the long transaction
        assert (o.events, o.pending_events) == (2, 0)  # out-of-order applies the others now
        assert strict.delta("public.t").count() == 0
        assert sorted((r.id, r.v) for r in syncer.delta("public.t").collect()) == [(2, "quick2")]
        long_tx.execute("commit")
    o = syncer.run(consumer="ooo")["public.t"]
    assert o.events == 1  # only the long transaction's event: the others are not applied twice
    syncer.assert_equal("public.t")
    s = strict.run(consumer="strict", mode="strict")["public.t"]
    assert s.events == 3
    strict.assert_equal("public.t")
    with psycopg.connect(dsn) as c:
        states = dict(c.execute("select consumer, out_of_order from pgcdc.consumer_state").fetchall())
    assert states == {"strict": "", "ooo": ""}  # out-of-order set emptied once the watermark passed


def test_aborted_transactions_leave_no_trace(db: psycopg.Connection, syncer, dsn: str) -> None:
    db.execute("create table t (id int primary key, v text)")
    db.execute("insert into t values (1, 'a')")
    capture.attach(db, "t")
    syncer.run()
    with _writer(dsn) as w:
        w.execute("begin")
        w.execute("update t set v = 'aborted'")
        w.execute("insert into t values (2, 'aborted')")
        w.execute("rollback")
        w.execute("insert into t values (3, 'kept')")
    report = syncer.run()["public.t"]
    assert report.events == 1
    syncer.assert_equal("public.t")


def test_rerun_with_nothing_new_writes_nothing(db: psycopg.Connection, syncer) -> None:
    db.execute("create table t (id int primary key)")
    db.execute("create table other (id int primary key)")
    capture.attach(db, "t")
    capture.attach(db, "other")
    db.execute("insert into t values (1)")
    syncer.run()
    before = syncer.commits("public.t")
    db.execute("insert into other values (1)")  # other tables' traffic moves txids along
    report = syncer.run()["public.t"]
    assert (report.events, report.batches) == (0, 0)
    assert syncer.commits("public.t") == before


def test_truncate_empties_the_target_and_keeps_later_rows(db: psycopg.Connection, syncer) -> None:
    db.execute("create table t (id int primary key)")
    db.execute("insert into t select generate_series(1, 10)")
    capture.attach(db, "t")
    syncer.run()
    with db.transaction():
        db.execute("truncate t")
        db.execute("insert into t values (5), (50)")
    db.execute("insert into t values (60)")
    report = syncer.run()["public.t"]
    syncer.assert_equal("public.t")
    assert syncer.delta("public.t").count() == 3
    assert report.copied == 3  # a batch holding a TRUNCATE is applied by copying the table


def test_predicate_rows_leaving_it_are_deleted(db: psycopg.Connection, syncer) -> None:
    db.execute("create table t (id int primary key, status text)")
    db.execute("insert into t values (1, 'live'), (2, 'draft'), (3, 'live')")
    capture.attach(db, "t", predicate="status = 'live'")
    syncer.run()
    assert sorted(r.id for r in syncer.delta("public.t").collect()) == [1, 3]
    db.execute("update t set status = 'draft' where id = 1")
    db.execute("update t set status = 'live' where id = 2")
    syncer.run()
    assert sorted(r.id for r in syncer.delta("public.t").collect()) == [2, 3]
    syncer.assert_equal("public.t")


def test_small_batches_give_the_same_result(db: psycopg.Connection, syncer) -> None:
    db.execute("create table t (id int primary key, v int)")
    capture.attach(db, "t")
    syncer.run()
    for i in range(12):
        db.execute("insert into t values (%s, 0)", (i,))
        db.execute("update t set v = v + 1 where id <= %s", (i,))
    report = syncer.run(max_events_per_batch=2, jdbc_partitions=2, small_batch_keys=1)["public.t"]
    assert report.batches == 12 and report.events == 24
    syncer.assert_equal("public.t")
    # 14 commits (create, copy, 12 batches): pgcdc's tables checkpoint every 100, not every 10
    log = Path(syncer.path("public.t")) / "_delta_log"
    assert (log / "00000000000000000013.json").exists() and not list(log.glob("*.checkpoint*.parquet"))


def test_copy_partitions_all_read_the_exported_snapshot(db: psycopg.Connection, syncer, dsn: str, pg_server) -> None:
    """The first sync reads its page ranges in one snapshot: were each range read in its own,
    an UPDATE between two reads could move a row into a range read later (copied twice) or
    into one read earlier (missed). Its connections leave no warning in the server's log."""
    from pgcdc.source import enrich
    from pgcdc.source.columns import table_columns
    from pgcdc.source.db import jdbc_options

    db.execute("create table t (id int primary key, v int not null) with (fillfactor = 100)")
    db.execute("insert into t select i, 0 from generate_series(1, 5000) i")
    t = capture.attach(db, "t")
    relpages = db.execute("select pg_relation_size('t') / 8192").fetchone()[0]
    server_log = pg_server.local.datadir / "server.log" if pg_server.local else None  # (not PGCDC_TEST_DSN's)
    seen = server_log.stat().st_size if server_log else 0
    with _writer(dsn) as exporter:
        exporter.execute("begin isolation level repeatable read read only")
        snapshot = exporter.execute("select pg_export_snapshot()").fetchone()[0]
        db.execute("update t set v = 1 where id <= 100")  # new versions land in the last pages
        db.execute("delete from t where id > 4900")
        db.execute("insert into t values (6000, 6)")
        rows = enrich.read_table(syncer.spark, jdbc_options(db), t, table_columns(db, "public.t"), 4,
                                 relpages, snapshot).collect()
        exporter.execute("commit")
    assert len(rows) == 5000 and len({r.id for r in rows}) == 5000  # each row once, as of the snapshot
    assert {r.v for r in rows} == {0} and max(r.id for r in rows) == 5000
    if server_log is not None:
        with server_log.open("rb") as f:
            f.seek(seen)
            said = f.read().decode(errors="replace")
        assert "already a transaction in progress" not in said, said[-500:]


def test_equal_keys_in_different_text_forms_merge_as_one(db: psycopg.Connection, syncer) -> None:
    db.execute("create table n (k numeric primary key, v text)")
    db.execute("create table ts (k timestamptz primary key, v text)")
    capture.attach(db, "n")
    capture.attach(db, "ts")
    syncer.run()
    db.execute("insert into n values (1.0, 'a')")
    db.execute("delete from n")
    db.execute("insert into n values (1.00, 'b')")  # equal to 1.0, queued as another text
    with db.transaction():
        db.execute("set local timezone = 'Asia/Tokyo'")
        db.execute("insert into ts values ('2024-01-01 09:00+09', 'a')")
    db.execute("update ts set v = 'b'")
    syncer.run(jdbc_partitions=3, small_batch_keys=1, driver_keys=0)  # equal keys must meet in one share
    syncer.assert_equal("public.n")
    syncer.assert_equal("public.ts")
    assert [r.v for r in syncer.delta("public.n").collect()] == ["b"]
    db.execute("update n set v = 'c'")  # the driver path finds the row of key '1' (stored as 1.00)
    db.execute("insert into n values (2.50, 'd')")
    syncer.run()
    syncer.assert_equal("public.n")
    assert sorted((r.k, r.v) for r in syncer.delta("public.n").collect()) == [("1", "c"), ("2.5", "d")]


@pytest.mark.parametrize("key_type", ["smallint", "integer", "bigint", "text", "composite"])
def test_every_key_falls_in_exactly_one_share(db: psycopg.Connection, key_type: str) -> None:
    """The share filters (integer keys hash as one int8, others as a record) split any key set
    into disjoint shares that cover it: negative, zero and extreme keys included."""
    from pgcdc.source import enrich

    composite = key_type == "composite"
    cols = "(a int, b text, primary key (a, b))" if composite else f"(k {key_type} primary key)"
    db.execute(f"create table s {cols}")
    t = capture.attach(db, "s")
    if composite:
        keys = "select g as a, g::text as b from generate_series(-500, 500) g"
    elif key_type == "text":
        keys = "select g::text as k from generate_series(-500, 500) g"
    else:
        bits = {"smallint": 16, "integer": 32, "bigint": 64}[key_type]
        low, high = -2**(bits - 1), 2**(bits - 1) - 1
        keys = (f"select g::{key_type} as k from generate_series(-500, 500) g "
                f"union all select ({low})::{key_type} union all select ({high})::{key_type}")
    prefixed = ", ".join(f"{c} as \"{enrich.KEY_PREFIX}{c}\"" for c in t.key_columns)
    total = db.execute(f"select count(*) from ({keys}) k").fetchone()[0]
    for n in (1, 2, 3, 4):
        counts = [db.execute(f"select count(*) from (select {prefixed} from ({keys}) k) q where {f}").fetchone()[0]
                  for f in enrich.shares(t, n)]
        assert sum(counts) == total and all(c > 0 for c in counts), (n, counts)


def test_column_names_delta_accepts_only_with_column_mapping_land_exactly(db: psycopg.Connection, syncer) -> None:
    """A table whose column names hold a space, comma, '=' (...) gets Delta column mapping
    (name mode) when its Delta table is created; a column renamed so later turns it on when
    the table is copied. Both stay exact through batches (verify, independent of the sync)."""
    from pgcdc.diff import rows as verify

    db.execute('create table odd (id int primary key, "my col" text, "a,b" int, "x=y(z)" date)')
    db.execute("create table plain (id int primary key, v text)")
    db.execute("insert into odd select i, 'v' || i, i, date '2024-01-01' + i from generate_series(1, 20) i")
    db.execute("insert into plain select i, 'p' || i from generate_series(1, 20) i")
    capture.attach(db, "odd")
    capture.attach(db, "plain")
    syncer.run()
    db.execute('update odd set "my col" = \'changed\', "a,b" = -1 where id <= 5')
    db.execute("delete from odd where id = 20")
    db.execute('alter table plain rename column v to "new name"')
    db.execute("update plain set \"new name\" = 'after' where id = 1")
    syncer.run()
    db.execute("update plain set \"new name\" = 'later' where id = 2")
    db.execute("insert into odd values (100, 'new', 7, null)")
    report = syncer.run()
    assert (report["public.odd"].upserted, report["public.plain"].upserted) == (1, 1)
    for t in capture.list_attached(db):
        found = verify.compare(syncer.spark, db, t, syncer.path(t.name))
        assert found.equal, found.line()
        props = syncer.spark.sql(f"describe detail delta.`{syncer.path(t.name)}`").collect()[0].properties
        assert props.get("delta.columnMapping.mode") == "name"
    assert syncer.delta("public.odd").columns == ["id", "my col", "a,b", "x=y(z)"]
