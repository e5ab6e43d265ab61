"""A partition truncated or dropped changes only its rows in Delta (sync/partition_step.py), against a
real PostgreSQL and Spark + Delta: no row of any other partition read (PostgreSQL's own counters
say so), no copy, Delta equal to PostgreSQL after; and a copy, said, where no predicate names the
partition's rows.

The oracle: each leaf read with psycopg (`only`), the Delta table with a plain Spark session."""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest

from fixtures.ingest import Syncer
from pgcdc.source import bounds, capture
from pgcdc.source.columns import table_columns

TREE = """
create table ev (id bigint, d date, region text collate "C", v text, primary key (id, d, region)) partition by range (d);
create table ev_01 partition of ev for values from ('2024-01-01') to ('2024-02-01');
create table ev_02 partition of ev for values from ('2024-02-01') to ('2024-03-01');
create table ev_03 partition of ev for values from ('2024-03-01') to ('2024-04-01') partition by list (region);
create table ev_03_eu partition of ev_03 for values in ('eu', 'e''u');
create table ev_03_us partition of ev_03 for values in ('us');
create table ev_03_other partition of ev_03 default;
create table ev_later partition of ev default;
insert into ev select i, date '2024-01-01' + (i % 150), (array['eu', 'e''u', 'us', 'ap'])[1 + i % 4], 'v' || i
  from generate_series(1, 3000) i;
analyze ev;
"""
LEAVES = ["ev_01", "ev_02", "ev_03_eu", "ev_03_us", "ev_03_other", "ev_later"]


def _read(db: psycopg.Connection) -> dict[str, int]:
    """Rows PostgreSQL read so far of each leaf, by scan or index (its statistics, once the
    readers' sessions have reported them)."""
    db.execute("select pg_stat_force_next_flush()")
    time.sleep(1.2)  # (another session reports its counters when it ends or within a second when idle)
    db.execute("select pg_stat_clear_snapshot()")
    rows = db.execute("select relname, coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) "
                      "from pg_stat_user_tables where relname like 'ev%'").fetchall()
    return {name: int(n) for name, n in rows}


def _equal(db: psycopg.Connection, syncer: Syncer, table: str = "ev") -> None:
    want = set(db.execute(f"select id, d, region, v from {table}").fetchall())
    got = {(r["id"], r["d"], r["region"], r["v"]) for r in syncer.delta(f"public.{table}").collect()}
    assert got == want, (sorted(want - got)[:5], sorted(got - want)[:5])


def _step(db: psycopg.Connection, syncer: Syncer, statement: str, untouched: list[str], **opts: Any) -> list[str]:
    """Run `statement`, sync, and check: Delta equals PostgreSQL, no copy, and no row of the
    `untouched` leaves read. Returns what the run said."""
    db.execute(statement)
    before, said = _read(db), len(syncer.lines)
    report = syncer.run(**opts)["public.ev"]
    after = _read(db)
    _equal(db, syncer)
    assert not report.copied, (statement, syncer.lines[said:])
    assert any("their rows replaced" in line for line in syncer.lines[said:]), syncer.lines[said:]
    read = {leaf: after.get(leaf, 0) - before.get(leaf, 0) for leaf in untouched}
    assert not any(read.values()), (statement, read)
    return syncer.lines[said:]


@pytest.mark.parametrize("engine", ["fast", "merge"])
def test_a_partition_truncated_or_dropped_replaces_its_rows_alone(db: psycopg.Connection, syncer: Syncer,
                                                                   engine: str) -> None:
    """Range and list partitions at two levels, DEFAULT partitions at both: a leaf truncated, a
    leaf dropped, a default truncated, a branch dropped with its leaves, each followed by writes
    to the partition's range and beside it; each run reads the changed partition alone."""
    db.execute(TREE)
    capture.attach(db, "ev")
    syncer.run(engine=engine)
    _equal(db, syncer)
    others = [leaf for leaf in LEAVES if leaf not in ("ev_01", "ev_02")]
    _step(db, syncer, "truncate ev_01", others, engine=engine)
    # a key in the same batch (the batch applies after the replacement; its read of one key may
    # scan a table this small, so no count of rows read here)
    _step(db, syncer, "insert into ev values (5, '2024-01-05', 'eu', 'again'); drop table ev_01", [], engine=engine)
    assert db.execute("select count(*) from ev where d < '2024-02-01'").fetchone()[0] == 0  # (gone with ev_01)
    _step(db, syncer, "truncate ev_03_other", ["ev_03_eu", "ev_03_us", "ev_later"], engine=engine)
    db.execute("insert into ev values (7001, '2024-03-07', 'ap', 'into the default')")
    syncer.run(engine=engine)
    # (rows of a dropped range now go to the DEFAULT partition: PostgreSQL reads there, not elsewhere)
    _step(db, syncer, "drop table ev_03", ["ev_02"], engine=engine)
    assert syncer.delta("public.ev").where("d >= '2024-03-01' and d < '2024-04-01'").count() == 0
    _step(db, syncer, "truncate ev_later", [], engine=engine)
    assert db.execute("select count(*) from ev").fetchone()[0] > 0


def test_a_row_written_after_the_truncate_by_an_older_transaction_stays(db: psycopg.Connection,
                                                                         syncer: Syncer) -> None:
    """txid order is not commit order: a transaction with a lower txid than the TRUNCATE writes
    the partition after the TRUNCATE committed. Its row must stay in Delta, whichever batch the
    two land in (one at a time here: the older transaction's first)."""
    db.execute(TREE)
    capture.attach(db, "ev")
    syncer.run()
    older = psycopg.connect(syncer.dsn, autocommit=False)
    older.execute("select pg_current_xact_id()")  # (its txid, lower than the TRUNCATE's)
    db.execute("truncate ev_02")
    older.execute("insert into ev values (80000, '2024-02-20', 'eu', 'older txid, later commit')")
    older.commit()
    older.close()
    syncer.run(max_events_per_batch=1)
    _equal(db, syncer)
    assert syncer.delta("public.ev").where("id = 80000").count() == 1


@pytest.mark.parametrize("kill", ["before-partition-commit", "after-partition-commit", "before-commit"])
def test_a_run_killed_around_the_partitions_commit_ends_exact(db: psycopg.Connection, syncer: Syncer,
                                                               monkeypatch: pytest.MonkeyPatch, kill: str) -> None:
    """Killed before the replacement commits, after it, or before the batch after it commits: the
    next run replaces the partition's rows again (or not at all) and applies the batch, exactly."""
    import pgcdc.faults

    db.execute(TREE)
    capture.attach(db, "ev")
    syncer.run()
    db.execute("truncate ev_02; insert into ev values (80001, '2024-02-21', 'us', 'after'), "
               "(80002, '2024-01-21', 'us', 'beside')")

    def act(name: str) -> None:
        if name == kill:
            raise RuntimeError(f"killed at {name}")
    monkeypatch.setattr(pgcdc.faults, "failpoint", act)
    with pytest.raises(RuntimeError, match=f"killed at {kill}"):
        syncer.run()
    monkeypatch.undo()
    syncer.run()
    _equal(db, syncer)


def test_soft_deletes_mark_the_rows_of_a_truncated_partition(db: psycopg.Connection, syncer: Syncer) -> None:
    db.execute(TREE)
    capture.attach(db, "ev")
    soft = {"target": {"deletes": "soft"}}
    syncer.run(**soft)
    n = db.execute("select count(*) from ev_02").fetchone()[0]
    db.execute("truncate ev_02")
    syncer.run(**soft)
    rows = syncer.delta("public.ev").where("d >= '2024-02-01' and d < '2024-03-01'")
    assert rows.where("_pgcdc_deleted").count() == n > 0
    assert rows.where("not _pgcdc_deleted").count() == 0


@pytest.mark.parametrize("tree, change, why", [
    ("create table h (id int primary key, v text) partition by hash (id); "
     "create table h0 partition of h for values with (modulus 2, remainder 0); "
     "create table h1 partition of h for values with (modulus 2, remainder 1)", "truncate h0", "hash partitioned"),
    ("create table h (id int, v text collate \"und-x-icu\", primary key (id, v)) partition by range (v); "
     "create table h0 partition of h for values from ('a') to ('m'); "
     "create table h1 partition of h for values from ('m') to (maxvalue)", "drop table h0", "linguistic collation"),
    ("create table h (id int, v text, primary key (id, v)) partition by list (id); "
     "create table h0 partition of h for values in (1, 2, 3); "
     "create table h1 partition of h default", "truncate h1", None),
])
def test_a_partition_no_predicate_names_is_copied_and_said(db: psycopg.Connection, syncer: Syncer, tree: str,
                                                           change: str, why: str | None) -> None:
    db.execute(tree)
    db.execute("insert into h select i, chr(97 + i % 26) from generate_series(1, 200) i")
    capture.attach(db, "h")
    syncer.run()
    db.execute(change)
    said = len(syncer.lines)
    report = syncer.run()["public.h"]
    syncer.assert_equal("public.h")
    assert bool(report.copied) == (why is not None), syncer.lines[said:]
    if why is not None:
        assert any(why in line and "copying" in line for line in syncer.lines[said:]), syncer.lines[said:]


KINDS = """
create table k (i int, b bigint, d date, ts timestamptz, tl timestamp, n numeric(10,2), t text collate "C",
                u uuid, f bool, v text, primary key (i, b, d, ts, tl, n, t, u, f)) partition by range (i, b);
create table k_low partition of k for values from (minvalue, minvalue) to (-5, 10);
create table k_mid partition of k for values from (-5, 10) to (5, maxvalue) partition by range (d, ts);
create table k_mid_a partition of k_mid for values from ('2020-01-01', '2020-01-01 00:00:00+00')
    to ('2020-06-01', minvalue);
create table k_mid_b partition of k_mid for values from ('2020-06-01', minvalue) to (maxvalue, maxvalue)
    partition by list (t);
create table k_mid_b1 partition of k_mid_b for values in ('a', 'b''c', '');
create table k_mid_b2 partition of k_mid_b default partition by range (n, tl);
create table k_mid_b2x partition of k_mid_b2 for values from (minvalue, minvalue) to (1.50, '2021-01-01 12:00');
create table k_mid_b2y partition of k_mid_b2 default partition by list (u);
create table k_mid_b2y1 partition of k_mid_b2y for values in ('00000000-0000-0000-0000-0000000000aa');
create table k_mid_b2y2 partition of k_mid_b2y default partition by list (f);
create table k_mid_b2y2t partition of k_mid_b2y2 for values in (true);
create table k_mid_b2y2f partition of k_mid_b2y2 for values in (false);
create table k_mid_z partition of k_mid default;
create table k_high partition of k default;
insert into k select (i % 21) - 10, (i % 30) - 5, date '2019-11-01' + (i % 400),
       timestamptz '2019-12-31 20:00:00+00' + (i % 300) * interval '1 day 7 hours',
       timestamp '2020-12-31 00:00' + (i % 50) * interval '1 hour', (i % 400) / 100.0,
       (array['a', 'b''c', '', 'x', 'Z'])[1 + i % 5],
       ('00000000-0000-0000-0000-0000000000' || (array['aa', 'bb'])[1 + i % 2])::uuid, i % 3 = 0, 'v' || i
  from generate_series(1, 4000) i;
"""


def test_every_leafs_predicates_name_its_rows_on_both_sides(db: psycopg.Connection, syncer: Syncer) -> None:
    """Multi-column ranges with MINVALUE and MAXVALUE, lists, DEFAULT partitions at five levels, over
    integers, dates, timestamps with and without a time zone, numerics, text under "C", uuids and
    booleans: for every leaf, the rows the PostgreSQL predicate selects from the root and those the
    Spark predicate selects from the Delta table are exactly the leaf's rows."""
    db.execute(KINDS)
    capture.attach(db, "k")
    syncer.run()
    described = db.execute("select bounds from pgcdc.attached where relid = 'k'::regclass").fetchone()[0]
    columns = table_columns(db, "public.k")
    leaves = {r[0] for r in db.execute("select relid::regclass::text from pg_partition_tree('k') where isleaf")}
    delta = syncer.delta("public.k")
    checked = 0
    for payload in described.values():  # (every partition: leaves and branches)
        rows = bounds.predicates(db, [payload], columns)
        name = payload["partition"]
        want = {r[0] for r in db.execute(f"select v from {name}").fetchall()}
        pg = {r[0] for r in db.execute(f"select v from k src where {rows.pg}").fetchall()}
        assert pg == want, (name, rows.pg, sorted(pg ^ want)[:5])
        spark = {r[0] for r in delta.where(rows.delta).select("v").collect()}
        assert spark == want, (name, rows.delta, sorted(spark ^ want)[:5])
        checked += name.split(".", 1)[1] in leaves and len(want) > 0
    assert checked >= 8, checked
