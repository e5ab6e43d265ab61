"""Partitioned tables, attached whole: every table of the tree captures under the root, at any depth.

The oracle: the root read with psycopg, the Delta table read with the suite's Spark session."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from fixtures.ingest import Syncer, disable_event_triggers
from pgcdc.errors import TableError
from pgcdc.source import capture
from pgcdc.checks.status import status_data

TREE = """
create table pay (id bigint, d date, v text, primary key (id, d)) partition by range (d);
create table pay_01 partition of pay for values from ('2024-01-01') to ('2024-02-01');
create table pay_02 partition of pay for values from ('2024-02-01') to ('2024-03-01') partition by hash (id);
create table pay_02_h0 partition of pay_02 for values with (modulus 2, remainder 0);
create table pay_02_h1 partition of pay_02 for values with (modulus 2, remainder 1);
insert into pay select i, date '2024-01-01' + (i % 59), 'v' || i from generate_series(1, 400) i;
"""


def _queued(db: psycopg.Connection) -> list[tuple[str, list[str] | None]]:
    """The queue's events of the one attached table, oldest first: (op, sorted keys)."""
    rows = db.execute("select op, keys from pgcdc.commit_queue order by txid, at").fetchall()
    return [(str(op), None if keys is None else sorted(keys)) for op, keys in rows]


def _assert_equal(db: psycopg.Connection, syncer: Syncer) -> None:
    want = {(i, d, v) for i, d, v in db.execute("select id, d, v from pay").fetchall()}
    got = {(r["id"], r["d"], r["v"]) for r in syncer.delta("public.pay").collect()}
    assert got == want, (sorted(want - got)[:5], sorted(got - want)[:5])


def test_statements_aimed_at_the_root_a_branch_or_a_leaf_queue_their_keys_under_the_root(
        db: psycopg.Connection) -> None:
    db.execute(TREE)
    t = capture.attach(db, "pay")
    assert t.key_columns == ["id", "d"]
    db.execute("delete from pgcdc.commit_queue")
    db.execute("insert into pay values (1000, '2024-01-05', 'root')")
    db.execute("insert into pay_02 values (1001, '2024-02-05', 'branch')")
    db.execute("insert into pay_02_h1 select i, '2024-02-06', 'leaf' from generate_series(1002, 1042) i "
               "where satisfies_hash_partition('pay_02'::regclass, 2, 1, i::bigint)")
    leaf_keys = db.execute("select count(*) from pay_02_h1 where v = 'leaf'").fetchone()[0]
    db.execute("update pay set d = '2024-02-10' where id = 1000")  # moves the row to another partition
    db.execute("delete from pay_01 where id = 2")
    db.execute("truncate pay_02_h0")
    queued = _queued(db)
    assert queued[0] == ("I", ["{1000,2024-01-05}"])
    assert queued[1] == ("I", ["{1001,2024-02-05}"])
    assert queued[2][0] == "I" and len(queued[2][1] or []) == leaf_keys > 0
    assert queued[3] == ("U", ["{1000,2024-01-05}", "{1000,2024-02-10}"])  # the old key and the new one
    assert queued[4] == ("D", ["{2,2024-01-03}"])
    assert queued[5] == ("T", None) and len(queued) == 6  # (each statement once: no trigger fired twice)
    triggers = db.execute("select count(*) from pg_trigger where tgname like 'pgcdc_capture_%'").fetchone()[0]
    assert triggers == 4 * 5  # insert, update, delete and truncate on each of the tree's five tables
    db.execute("create table pay_03 partition of pay for values from ('2024-03-01') to ('2024-04-01')")
    db.execute("insert into pay_03 values (3000, '2024-03-02', 'later')")  # (the event trigger added capture)
    assert _queued(db)[-1] == ("I", ["{3000,2024-03-02}"])
    assert not [p for p in status_data(db)["problems"] if "capture" in p], status_data(db)["problems"]
    capture.detach(db, "pay")
    assert db.execute("select count(*) from pg_trigger where tgname like 'pgcdc_capture_%'").fetchone()[0] == 0

    assert status_data(db)["ddl_guard"]
    db.execute("drop event trigger pgcdc_ddl; create event trigger pgcdc_ddl on ddl_command_end "
               "when tag in ('ALTER TABLE') execute function pgcdc._on_ddl()")  # (as schema v8 made it)
    assert not status_data(db)["ddl_guard"]  # partitions created later would go unseen
    capture.install(db)  # (an upgrade makes it anew)
    assert status_data(db)["ddl_guard"]


def test_a_partition_attached_or_detached_queues_its_rows_keys_not_a_copy(db: psycopg.Connection) -> None:
    db.execute(TREE)
    capture.attach(db, "pay")
    db.execute("create table pay_05 (like pay)")
    db.execute("insert into pay_05 select i, date '2024-05-01' + i % 30, 'x' from generate_series(1, 25000) i")
    db.execute("delete from pgcdc.commit_queue")
    db.execute("set datestyle = 'SQL, DMY'")  # (the keys' text must not follow the session's settings)
    db.execute("alter table pay attach partition pay_05 for values from ('2024-05-01') to ('2024-06-01')")
    queued = _queued(db)
    assert [op for op, _ in queued] == ["U"] * 3  # chunks of 10000 keys
    keys = {k for _, chunk in queued for k in chunk or []}
    assert len(keys) == 25000 and "{1,2024-05-02}" in keys
    db.execute("delete from pgcdc.commit_queue")
    db.execute("alter table pay detach partition pay_05")
    assert {k for _, chunk in _queued(db) for k in chunk or []} == keys and {op for op, _ in _queued(db)} == {"U"}
    db.execute("delete from pgcdc.commit_queue")
    db.execute("drop table pay_05")  # (no longer the tree's: nothing to queue)
    assert _queued(db) == []


@pytest.mark.parametrize("guard", ["event trigger", "no event trigger"])
def test_delta_equals_a_partitioned_table_through_its_trees_life(db: psycopg.Connection, syncer: Syncer,
                                                                  guard: str) -> None:
    """Writes aimed at the root, a branch and leaves; a partition-key update; a partition created
    after attach, one attached with rows, one detached, one dropped, one truncated. Without the
    event trigger each change to the tree is seen by the next run, which copies the table (and
    status asks for `pgcdc attach`) until attach makes capture follow the tree again."""
    db.execute(TREE)
    if guard == "no event trigger":
        disable_event_triggers(db)
    capture.attach(db, "pay")
    syncer.run()
    _assert_equal(db, syncer)

    db.execute("update pay set v = 'root' where id % 7 = 0")
    db.execute("update pay_02 set v = 'branch' where id % 5 = 0")
    db.execute("delete from pay_02_h1 where id % 3 = 0")
    db.execute("update pay set d = d + 31 where id between 10 and 20 and d < '2024-01-29'")  # to February
    db.execute("insert into pay_01 select i, '2024-01-09', 'leaf' from generate_series(500, 520) i")
    syncer.run()
    _assert_equal(db, syncer)

    def tree_change(sql: str, copied: bool = False) -> None:
        """A change to the tree, then a write aimed at the changed part; where no event trigger saw
        the change, status names it and runs copy the table until `pgcdc attach pay`. With the
        event trigger, a partition attached or detached has its rows' keys queued (no copy of the
        whole table), a dropped one replaces its rows alone; `copied`: a copy of the whole table."""
        db.execute(sql)
        db.execute("insert into pay_03 select i, '2024-03-03', 'new leaf' from generate_series(900, 905) i "
                   "on conflict do nothing")
        report = syncer.run()["public.pay"]
        _assert_equal(db, syncer)
        if guard == "event trigger":
            assert bool(report.copied) == copied, (sql, report.line())
        problems = [p for p in status_data(db)["problems"] if "public.pay" in p]
        if guard == "no event trigger":
            assert problems and "run `pgcdc attach public.pay`" in problems[0], problems
            capture.attach(db, "pay")
            db.execute("update pay_03 set v = 'after attach' where id = 900")
            syncer.run()
            _assert_equal(db, syncer)
        assert not [p for p in status_data(db)["problems"] if "public.pay" in p]

    tree_change("create table pay_03 partition of pay for values from ('2024-03-01') to ('2024-04-01')")
    tree_change("create table pay_04 (like pay); insert into pay_04 select i, '2024-04-02', 'came with it' "
                "from generate_series(700, 750) i; "
                "alter table pay attach partition pay_04 for values from ('2024-04-01') to ('2024-05-01')")
    tree_change("alter table pay detach partition pay_01")
    db.execute("insert into pay_01 values (1, '2024-01-30', 'detached: not the root''s')")
    tree_change("drop table pay_04")  # (its rows alone replaced: tests/test_partitions_in_place.py)
    # to drop a partition without a copy: detach it first (its keys are queued), then drop it
    tree_change("alter table pay detach partition pay_03; drop table pay_03; create table pay_03 partition of pay "
                "for values from ('2024-03-01') to ('2024-04-01')")
    db.execute("truncate pay_02_h0")  # (fires its own truncate trigger: no change to the tree)
    db.execute("insert into pay_02_h1 select i, '2024-02-20', 'after truncate' from generate_series(800, 820) i "
               "where satisfies_hash_partition('pay_02'::regclass, 2, 1, i::bigint)")
    syncer.run()
    _assert_equal(db, syncer)
    assert status_data(db)["healthy"], status_data(db)["problems"]


def test_a_table_made_a_partition_of_another_is_named_and_copied(db: psycopg.Connection, syncer: Syncer) -> None:
    """Attached whole, then attached as a partition of a table pgcdc does not capture: statements
    aimed at that one fire only its triggers. Each run copies it; status says what to do."""
    db.execute("create table outer_t (id int primary key, v text) partition by range (id)")
    db.execute("create table t (id int primary key, v text)")
    db.execute("insert into t select i, 'a' from generate_series(1, 10) i")
    capture.attach(db, "t")
    syncer.run()
    db.execute("alter table outer_t attach partition t for values from (0) to (100)")
    db.execute("insert into outer_t values (50, 'through the parent')")
    reports: dict[str, Any] = syncer.run()
    assert reports["public.t"].copied == 11
    problems = [p for p in status_data(db)["problems"] if "public.t " in p or "public.t:" in p]
    assert problems and "public.t is now a partition of public.outer_t" in problems[0], status_data(db)["problems"]
    got = {(r["id"], r["v"]) for r in syncer.delta("public.t").collect()}
    assert got == set(db.execute("select id, v from t").fetchall())


def test_a_delta_table_partitioned_by_a_column_attach_names_and_laid_out_again_when_it_changes(
        db: psycopg.Connection, syncer: Syncer) -> None:
    from delta.tables import DeltaTable

    db.execute("create table ev (id bigint primary key, day date not null, v text)")
    db.execute("insert into ev select i, date '2024-01-01' + i % 5, 'v' || i from generate_series(1, 100) i")
    with pytest.raises(TableError, match="table public.ev has no column nope"):
        capture.attach(db, "ev", delta_partition_by="nope")
    capture.attach(db, "ev", delta_partition_by="day")

    def layout() -> list[str]:
        return DeltaTable.forPath(syncer.spark, syncer.path("public.ev")).detail().collect()[0]["partitionColumns"]

    def equal() -> None:
        want = set(db.execute("select id, day, v from ev").fetchall())
        assert {(r["id"], r["day"], r["v"]) for r in syncer.delta("public.ev").collect()} == want

    syncer.run()
    assert layout() == ["day"] and any("engine merge: the table is partitioned" in line for line in syncer.lines)
    equal()
    db.execute("update ev set day = day + 10 where id <= 10; delete from ev where id between 50 and 55; "
               "insert into ev values (200, '2024-02-01', 'new')")
    syncer.run()
    equal()
    capture.attach(db, "ev")  # attached again without it: every consumer copies it unpartitioned
    assert syncer.run()["public.ev"].copied == 95
    assert layout() == []
    equal()


def test_a_partition_attached_and_dropped_where_no_event_trigger_saw_it_leaves_no_rows(
        db: psycopg.Connection, syncer: Syncer) -> None:
    """Without the event trigger: a partition attached holding rows is copied by the runs (a gap),
    then dropped before `pgcdc attach` made capture follow it, which leaves the tree as capture
    knew it. Attaching again copies the table, so the dropped partition's rows leave Delta."""
    db.execute(TREE)
    disable_event_triggers(db)
    capture.attach(db, "pay")
    syncer.run()
    db.execute("create table pay_09 (like pay)")
    db.execute("insert into pay_09 select i, '2024-09-02', 'came with it' from generate_series(900, 930) i")
    db.execute("alter table pay attach partition pay_09 for values from ('2024-09-01') to ('2024-10-01')")
    syncer.run()  # (a gap: the table copied, pay_09's rows with it)
    _assert_equal(db, syncer)
    db.execute("drop table pay_09")
    capture.attach(db, "pay")
    syncer.run()
    _assert_equal(db, syncer)
