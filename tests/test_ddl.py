"""DDL on attached tables against real PostgreSQL (and Spark + Delta): the application's
statements keep working whatever its DDL, and Delta ends with the table's new shape."""

from __future__ import annotations

import psycopg
import pytest

from pgcdc.source import capture
from pgcdc.checks.status import status_report
from fixtures.ingest import Syncer


def _ops(conn: psycopg.Connection) -> list[str]:
    return [r[0] for r in conn.execute("select op from pgcdc.commit_queue order by txid, op")]


@pytest.mark.parametrize("ddl", [
    "alter table t rename column id to key_id",
    "alter table t rename column v to value",
    "alter table t alter column v type varchar(20)",
    "alter table t add column extra int not null default 7",
    "alter table t drop column v",
    "alter table t rename to t_renamed",
    "create schema if not exists s2; alter table t set schema s2",
])
def test_application_writes_survive_ddl_and_only_a_rewrite_queues_a_copy(db: psycopg.Connection, ddl: str) -> None:
    db.execute("create table t (id int primary key, v text)")
    t = capture.attach(db, "t", predicate=None)
    db.execute("insert into t values (1, 'a')")
    db.execute(ddl)
    name = next(a.name for a in capture.list_attached(db) if a.table_id == t.table_id)
    key = capture.list_attached(db)[0].key_columns[0]
    db.execute(f"insert into {name} ({key}) values (2)")  # fails with a capture that names the old column
    db.execute(f"update {name} set {key} = 3 where {key} = 2")
    db.execute(f"delete from {name} where {key} = 1")
    # the key change writes the old key (row trigger) and the new one (statement trigger); a DDL that
    # rewrites the table (the retype) queues a T (pgcdc_rewrite); other column changes are left to
    # the consumers, which change their Delta tables in place (lake/evolve.py)
    ops = _ops(db)
    assert ops[0] == "I" and ops[-4:] == ["I", "U", "U", "D"]
    assert set(ops[1:-4]) == ({"T"} if " type " in ddl else set())
    assert db.execute("select array_agg(k order by k) from pgcdc.commit_queue, unnest(keys) k where op = 'U'"
                      ).fetchone()[0] == ["2", "3"]


def test_retyping_a_key_column_is_refused_by_postgresql_naming_the_trigger(db: psycopg.Connection) -> None:
    """The one DDL capture does not follow: PostgreSQL refuses to retype a column a trigger's
    UPDATE OF list names (pgcdc's key-change trigger); detach, retype, attach, resync."""
    db.execute("create table t (id int primary key, v text)")
    capture.attach(db, "t")
    with pytest.raises(psycopg.errors.FeatureNotSupported, match="trigger pgcdc_capture_pk on table t depends on column"):
        db.execute("alter table t alter column id type bigint")
    capture.detach(db, "t")
    db.execute("alter table t alter column id type bigint")
    capture.attach(db, "t")
    db.execute("insert into t values (1, 'a')")


def test_dropping_the_key_stops_capture_loudly_never_the_application(db: psycopg.Connection) -> None:
    db.execute("create table t (id int primary key, v text)")
    capture.attach(db, "t")
    with pytest.raises(psycopg.errors.DependentObjectsStillExist):
        db.execute("alter table t drop column id")  # pgcdc's key-change trigger depends on it
    db.execute("alter table t drop column id cascade")
    db.execute("insert into t values ('still works')")
    report, healthy = status_report(db)
    assert not healthy and "capture triggers of public.t are missing" in report


def test_predicate_column_renamed_stops_capture_loudly_never_the_application(db: psycopg.Connection) -> None:
    db.execute("create table t (id int primary key, status text)")
    capture.attach(db, "t", predicate="status <> 'draft'")
    db.execute("alter table t rename column status to state")
    db.execute("insert into t values (1, 'live')")
    db.execute("update t set state = 'x'")
    report, healthy = status_report(db)
    assert not healthy and "capture triggers of public.t are missing" in report


def test_delta_follows_a_renamed_key_and_an_added_column(db: psycopg.Connection, syncer: Syncer) -> None:
    db.execute("create table t (id int primary key, v text)")
    capture.attach(db, "t")
    db.execute("insert into t select i, 'v' || i from generate_series(1, 30) i")
    syncer.run()
    db.execute("alter table t rename column id to key_id")
    db.execute("alter table t add column extra int not null default 7")  # every existing row has 7
    db.execute("update t set v = 'changed' where key_id <= 5")
    db.execute("insert into t values (100, 'new', 8)")
    syncer.run()
    syncer.assert_equal("public.t")
    assert syncer.delta("public.t").columns == ["key_id", "v", "extra"]
    db.execute("delete from t where key_id = 100")
    syncer.run()
    syncer.assert_equal("public.t")


def test_without_the_ddl_guard_a_renamed_key_queues_copies_and_says_so(db: psycopg.Connection,
                                                                      syncer: Syncer) -> None:
    """An install that may not create event triggers: the capture code keeps the old names.
    Writes must still succeed; each one queues a copy (Delta stays exact), status says why,
    and attaching again restores capture by keys."""
    db.execute("alter event trigger pgcdc_ddl disable")
    db.execute("create table t (id int primary key, v text)")
    capture.attach(db, "t")
    db.execute("insert into t select i, 'v' from generate_series(1, 20) i")
    syncer.run()
    db.execute("alter table t rename column id to key_id")
    db.execute("insert into t values (100, 'new')")  # the capture code names id: warned, not failed
    db.execute("update t set key_id = 101 where key_id = 100")  # the key-change row trigger too
    db.execute("delete from t where key_id = 1")
    assert _ops(db) == ["T", "T", "T", "T"]  # (the key change fires the row and the statement trigger)
    report, healthy = status_report(db)
    assert not healthy and "capture of public.t no longer fits the table" in report and "pgcdc attach public.t" in report
    syncer.run()  # the queued copy
    syncer.assert_equal("public.t")
    capture.attach(db, "t")  # follows the table again
    assert capture.list_attached(db)[0].key_columns == ["key_id"]
    db.execute("update t set v = 'after' where key_id = 2")
    assert _ops(db)[-1] == "U"
    syncer.run()
    syncer.assert_equal("public.t")
    assert status_report(db)[1]


def test_a_rewrite_that_keeps_the_columns_reaches_delta(db: psycopg.Connection, syncer: Syncer) -> None:
    """ALTER ... TYPE to the column's own type with USING changes every value, fires no
    capture trigger and keeps the columns' names and types: the rewrite guard queues a copy."""
    db.execute("create table t (id int primary key, v text)")
    db.execute("insert into t select i, 'v' || i from generate_series(1, 50) i")
    capture.attach(db, "t")
    syncer.run()
    db.execute("alter table t alter column v type text using upper(v)")
    assert _ops(db)[-1] == "T"
    syncer.run()
    delta = sorted((r.id, r.v) for r in syncer.delta("public.t").collect())
    assert delta == db.execute("select id, v from t order by id").fetchall() and delta[0] == (1, "V1")
