"""Fan-in: tenant schemas' tables of one shape land in one Delta table, each under its shard.

The oracle: each tenant's table read with psycopg, the Delta table read with the suite's
Spark session (no pgcdc code)."""

from __future__ import annotations

import psycopg
import pytest

from fixtures.ingest import Syncer
from pgcdc.errors import TableError, TargetError
from pgcdc.lake import shards, tablelog
from pgcdc.source import capture
from pgcdc.sync import plan
from pgcdc.sync.runs import resync
from pgcdc.checks.status import status_report
from pgcdc.checks.verify import verify

TENANTS = 3
SHARD = "_pgcdc_shard"


def _tenants(db: psycopg.Connection, rows: int = 50) -> None:
    """tenant_1..3.orders, the same ids in each (keys that collide but for the shard)."""
    for n in range(1, TENANTS + 1):
        db.execute(f"create schema tenant_{n}; create table tenant_{n}.orders (id int primary key, "
                   f"customer text not null, amount numeric(10,2)); insert into tenant_{n}.orders "
                   f"select i, 'c{n}-' || i, i * {n} from generate_series(1, {rows}) i")


def _attach(db: psycopg.Connection) -> None:
    for n in range(1, TENANTS + 1):
        capture.attach(db, f"tenant_{n}.orders", shard=n, into="app.orders")


def _postgres(db: psycopg.Connection, tenants: range = range(1, TENANTS + 1)) -> set[tuple]:
    return {(n, *row) for n in tenants
            for row in db.execute(f"select id, customer, amount from tenant_{n}.orders").fetchall()}


def _delta(syncer: Syncer) -> set[tuple]:
    rows = syncer.delta("app.orders").collect()
    return {(r[SHARD], r["id"], r["customer"], r["amount"]) for r in rows}


def _files(syncer: Syncer, shard: int) -> list[str]:
    """The data files holding one shard's rows."""
    frame = syncer.delta("app.orders").where(f"{SHARD} = {shard}").select("_metadata.file_path")
    return sorted({r[0] for r in frame.collect()})


def test_tenants_land_in_one_table_and_a_resync_of_one_leaves_the_others_untouched(
        db: psycopg.Connection, syncer: Syncer) -> None:
    _tenants(db)
    _attach(db)
    syncer.run()
    delta = syncer.delta("app.orders")
    assert delta.columns == ["id", "customer", "amount", SHARD]
    files = tablelog.read_state(syncer.spark, syncer.path("app.orders"), need_txns=False).all_files
    assert files and all(p.startswith(tuple(shards.folder(n) for n in (1, 2, 3))) for p in files), files
    # a source's compaction counts its own partition's files
    log, own = tablelog.read_state(syncer.spark, syncer.path("app.orders")), sum(p.startswith("_pgcdc_shard=2/")
                                                                                   for p in files)
    assert plan.compact_reason(log, own, shard=2) == f"{own} small files" and not plan.compact_reason(log, own + 1, 2)
    assert _delta(syncer) == _postgres(db) and len(_postgres(db)) == 150
    # changes in each tenant, equal keys in all three; a TRUNCATE of one replaces only its rows
    db.execute("update tenant_1.orders set amount = amount + 1 where id <= 10")
    db.execute("delete from tenant_2.orders where id between 5 and 9")
    db.execute("insert into tenant_3.orders values (51, 'new', 1), (52, 'new', 2)")
    db.execute("truncate tenant_2.orders; insert into tenant_2.orders values (7, 'after-truncate', 7)")
    reports = syncer.run()
    assert reports["tenant_2.orders"].copied == 1
    assert _delta(syncer) == _postgres(db)
    with psycopg.connect(syncer.dsn) as conn:
        tables = capture.list_attached(conn)
        assert all(c.equal for c in verify(syncer.spark, conn, str(syncer.root), tables, "test")), \
            [c.line() for c in verify(syncer.spark, conn, str(syncer.root), tables, "test")]

    # a resync of tenant 3 rewrites its shard alone: the others' files and rows stay as they were
    before = {n: (_files(syncer, n), sorted(r for r in _delta(syncer) if r[0] == n)) for n in (1, 2)}
    versions = syncer.spark.sql(f"describe history delta.`{syncer.path('app.orders')}`").count()
    db.execute("update tenant_3.orders set customer = 'changed' where id = 1")
    resync(syncer.settings(), ["tenant_3.orders"], syncer.spark)
    assert {n: (_files(syncer, n), sorted(r for r in _delta(syncer) if r[0] == n)) for n in (1, 2)} == before
    history = syncer.spark.sql(f"describe history delta.`{syncer.path('app.orders')}`").orderBy("version").collect()
    assert len(history) == versions + 1 and "_pgcdc_shard" in str(history[-1]["operationParameters"])
    assert _delta(syncer) == _postgres(db)
    report, healthy = status_report(db)
    assert healthy and report.count("app.orders") >= 3, report  # each source a table of its own, in one Delta table
    # each source keeps its own state in the table: three appIds, tenant 3's one batch further
    assert {f"test@{n}.json" for n in (1, 2, 3)} <= {p.name for p in (syncer.root / "app.orders" / "_pgcdc").iterdir()}


def test_a_fan_ins_history_is_folded_once_a_pass_after_its_sources_in_lanes(db: psycopg.Connection,
                                                                           syncer: Syncer) -> None:
    """Three sources applied in two lanes share one history: it follows their Delta table once
    a pass, after the lanes (not once a source, the folds taking turns), and is exact."""
    from fixtures.history import history_faults

    _tenants(db, rows=20)
    _attach(db)
    run = {"target": {"history": True}, "parallel_tables": 2}
    syncer.run(**run)
    for n in range(1, TENANTS + 1):
        db.execute(f"update tenant_{n}.orders set amount = -amount where id <= {n}")
    db.execute("delete from tenant_2.orders where id = 20")
    syncer.run(**run)
    hpath = syncer.path("app.orders") + "__history"
    folds = [v for v in range(tablelog.latest_version(syncer.spark, hpath) + 1)
             if any((a.get("txn") or {}).get("appId") == "pgcdc:history"
                    for a in tablelog.commit_actions(syncer.spark, hpath, v) or [])]
    assert len(folds) == 2, folds  # (its creation, one fold for the second pass's three sources)
    lines = [line for line in syncer.lines if "history follows" in line]
    assert len(lines) == 2 and all(line.startswith("app.orders: ") for line in lines), lines
    assert "6 row versions opened, 7 closed" in lines[1], lines
    fault = history_faults(syncer.spark, syncer.path("app.orders"), ["id", SHARD], samples=2)
    assert fault is None, fault
    current = syncer.spark.read.format("delta").load(hpath).where("_pgcdc_is_current").collect()
    assert {(r[SHARD], r["id"], r["customer"], r["amount"]) for r in current} == _postgres(db)


def test_sources_that_do_not_fit_a_fan_in_are_refused_naming_why(db: psycopg.Connection) -> None:
    _tenants(db, rows=3)
    capture.attach(db, "tenant_1.orders", shard=1, into="app.orders")
    db.execute("create table tenant_4_orders (id int primary key, customer text not null, amount numeric(12,2))")
    db.execute("create table keyed (id int, customer text not null, amount numeric(10,2), primary key (id, customer))")
    db.execute("create table plain (id int primary key)")
    capture.attach(db, "plain")
    cases = [
        (dict(table="tenant_2.orders", shard=None), "without a shard"),
        (dict(table="tenant_2.orders", shard=1), "shard 1 of app.orders is tenant_1.orders's"),
        (dict(table="tenant_4_orders", shard=4), "column amount is numeric(12,2), not numeric(10,2)"),
        (dict(table="keyed", shard=5), "the key of public.keyed (id, customer) is not the key of tenant_1.orders (id)"),
    ]
    before = db.execute("select count(*) from pgcdc.attached").fetchone()[0]
    for case, why in cases:
        with pytest.raises(TableError, match=why.replace("(", r"\(").replace(")", r"\)")):
            capture.attach(db, case["table"], shard=case["shard"], into="app.orders")
    with pytest.raises(TableError, match="public.plain is an attached table"):
        capture.attach(db, "tenant_2.orders", shard=2, into="public.plain")
    db.execute("create schema app; create table app.orders (id int primary key)")
    with pytest.raises(TableError, match="app.orders is the name of a fan-in"):
        capture.attach(db, "app.orders")
    assert db.execute("select count(*) from pgcdc.attached").fetchone()[0] == before  # nothing attached


def test_a_column_added_to_one_source_lands_null_for_the_others_and_a_retyped_one_is_refused(
        db: psycopg.Connection, syncer: Syncer) -> None:
    _tenants(db, rows=5)
    _attach(db)
    syncer.run()
    db.execute("alter table tenant_1.orders add column note text default 'n1'")
    syncer.run()
    rows = syncer.delta("app.orders").collect()
    assert {(r[SHARD], r["note"]) for r in rows} == {(1, "n1"), (2, None), (3, None)}
    db.execute("alter table tenant_2.orders add column note text default 'n2'")  # now tenant 2 has it too
    db.execute("update tenant_3.orders set amount = 0 where id = 1")
    syncer.run()
    rows = syncer.delta("app.orders").collect()
    assert {(r[SHARD], r["note"]) for r in rows} == {(1, "n1"), (2, "n2"), (3, None)}
    assert {(r[SHARD], r["id"], r["amount"]) for r in rows if r["id"] == 1} >= {(3, 1, 0)}
    db.execute("alter table tenant_3.orders alter column amount type numeric(12,2)")
    with pytest.raises(TargetError, match=r"column amount of tenant_3.orders is numeric\(12,2\), but tenant_1.orders has "
                                          r"it as numeric\(10,2\): alter every source of app.orders alike"):
        syncer.run(tables=["tenant_3.orders"])


def test_a_detached_source_leaves_with_its_rows_unless_kept_and_a_dropped_one_too(
        db: psycopg.Connection, syncer: Syncer) -> None:
    _tenants(db, rows=20)
    _attach(db)
    syncer.run()
    capture.detach(db, "tenant_1.orders", keep_rows=True)
    capture.detach(db, "tenant_2.orders")
    db.execute("delete from tenant_3.orders where id > 15")
    syncer.run()
    shards_left = {r[SHARD] for r in syncer.delta("app.orders").select(SHARD).collect()}
    assert shards_left == {1, 3}
    assert any("tenant_2.orders left fan-in app.orders: removed its 20 rows" in line for line in syncer.lines)
    assert {r for r in _delta(syncer) if r[0] == 3} == {r for r in _postgres(db) if r[0] == 3}
    db.execute("drop table tenant_3.orders")  # a dropped source leaves too
    syncer.run()
    assert {r[SHARD] for r in syncer.delta("app.orders").select(SHARD).collect()} == {1}
    lines = len(syncer.lines)
    syncer.run()  # (nothing left to remove: no line)
    assert not any("left fan-in" in line for line in syncer.lines[lines:])
    # tenant 2 attached again under its shard: its next run copies its shard (a fan-in's source is not
    # reconciled by range), and its rows come back
    capture.attach(db, "tenant_2.orders", shard=2, into="app.orders")
    assert syncer.run(tables=["tenant_2.orders"])["tenant_2.orders"].copied == 20
    assert any("a fan-in's source is copied into its shard" in line for line in syncer.lines[-5:]), syncer.lines[-5:]
    assert {r for r in _delta(syncer) if r[0] == 2} == _postgres(db, range(2, 3))


def test_fan_in_names_that_are_no_table_names_are_refused(db: psycopg.Connection) -> None:
    _tenants(db, rows=1)
    db.execute("alter table tenant_2.orders add column _pgcdc_shard int")
    for into in ("orders", "a.b.c", "../x.y", "a/b.c", "a\\b.c"):
        with pytest.raises(TableError, match="is not of the form schema.table"):
            capture.attach(db, "tenant_1.orders", shard=1, into=into)
    with pytest.raises(TableError, match="has a column named _pgcdc_shard"):
        capture.attach(db, "tenant_2.orders", shard=2, into="app.orders")
    assert db.execute("select count(*) from pgcdc.attached").fetchone()[0] == 0


def test_a_column_retyped_in_every_source_retypes_the_fan_ins_delta_table(db: psycopg.Connection,
                                                                          syncer: Syncer) -> None:
    """amount numeric(10,2) -> numeric(12,2): while some sources still have the old type the
    altered ones are refused, naming a source that differs; once all agree, the next run retypes
    the Delta table (every shard's rows kept meanwhile) and each source's copy lands its rows."""
    _tenants(db, rows=10)
    _attach(db)
    syncer.run()
    for n in (1, 2):
        db.execute(f"alter table tenant_{n}.orders alter column amount type numeric(12,2)")
    db.execute("update tenant_1.orders set amount = 1234567890.12 where id = 1")
    db.execute("update tenant_3.orders set amount = 7 where id = 1")
    with pytest.raises(TargetError, match="but tenant_3.orders has it as numeric"):
        syncer.run()
    assert any("tenant_2.orders: FAILED" in line and "tenant_3.orders has it as numeric(10,2)" in line
               for line in syncer.lines), syncer.lines[-10:]
    assert {r for r in _delta(syncer) if r[0] == 3} == _postgres(db, range(3, 4))
    db.execute("alter table tenant_3.orders alter column amount type numeric(12,2)")
    lines = len(syncer.lines)
    syncer.run()
    assert any("retyped amount decimal(10,2) -> decimal(12,2)" in line for line in syncer.lines[lines:])
    assert dict(syncer.delta("app.orders").dtypes)["amount"] == "decimal(12,2)"
    assert _delta(syncer) == _postgres(db)
