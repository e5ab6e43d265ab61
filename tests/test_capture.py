"""Capture layer against a real PostgreSQL: every kind of write lands in the commit queue."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import psycopg
import pytest

from pgcdc.source import capture
from pgcdc.cli.main import main
from pgcdc.errors import SchemaError, TableError


def events(conn: psycopg.Connection) -> list[tuple[str, str, list[str] | None]]:
    """(op, table, sorted keys) of every queued event, in txid order."""
    rows = conn.execute("select q.op, format('%I.%I', n.nspname, c.relname), q.keys from pgcdc.commit_queue q "
                        "join pgcdc.attached a using (table_id) join pg_class c on c.oid = a.relid "
                        "join pg_namespace n on n.oid = c.relnamespace order by q.txid, q.op").fetchall()
    return [(op, table, sorted(keys) if keys is not None else None) for op, table, keys in rows]


def test_each_operation_one_event_per_statement(db: psycopg.Connection) -> None:
    db.execute("create table t (id bigint primary key, v text)")
    capture.attach(db, "t")
    db.execute("insert into t select i, 'x' from generate_series(1, 3) i")
    db.execute("update t set v = 'y' where id >= 2")
    db.execute("delete from t where id = 1")
    db.execute("update t set v = 'z' where id = 99")  # touches nothing: no event
    assert events(db) == [("I", "public.t", ["1", "2", "3"]), ("U", "public.t", ["2", "3"]),
                          ("D", "public.t", ["1"])]


def test_txid_is_the_writers_top_level_transaction(db: psycopg.Connection) -> None:
    db.execute("create table t (id int primary key)")
    capture.attach(db, "t")
    with db.transaction():
        db.execute("insert into t values (1)")
        with db.transaction():  # a savepoint: a subtransaction with its own xid
            db.execute("insert into t values (2)")
        with pytest.raises(psycopg.errors.UniqueViolation), db.transaction():
            db.execute("insert into t values (1)")  # rolled back to its savepoint: no event
        top = db.execute("select pg_current_xact_id()::text").fetchone()[0]
    rows = db.execute("select txid::text, keys from pgcdc.commit_queue order by keys").fetchall()
    assert rows == [(top, ["1"]), (top, ["2"])]


def test_rolled_back_transaction_leaves_no_events(db: psycopg.Connection) -> None:
    db.execute("create table t (id int primary key)")
    capture.attach(db, "t")
    with pytest.raises(RuntimeError), db.transaction():
        db.execute("insert into t values (1)")
        raise RuntimeError("abort")
    assert events(db) == []


def test_primary_key_update_captures_old_and_new_key(db: psycopg.Connection) -> None:
    db.execute("create table t (id int primary key, v text)")
    db.execute("insert into t values (1, 'a'), (2, 'b')")
    capture.attach(db, "t")
    db.execute("update t set id = id + 10")
    db.execute("update t set v = 'c' where id = 11")  # no key change: only the statement event
    got = events(db)
    assert all(op == "U" for op, _, _ in got)
    first = db.execute("select min(txid) from pgcdc.commit_queue").fetchone()[0]
    keys = db.execute("select array_agg(k order by k) from pgcdc.commit_queue, unnest(keys) k where txid = %s",
                      (first,)).fetchone()[0]
    assert keys == ["1", "11", "12", "2"]
    assert got[-1] == ("U", "public.t", ["11"])


@pytest.mark.parametrize("predicate", [None, "v <> 'hidden'"])
def test_composite_key_change_captures_old_key(db: psycopg.Connection, predicate: str | None) -> None:
    db.execute("create table t (a int, b text, v text, primary key (a, b))")
    db.execute("insert into t values (1, 'x', 'a')")
    capture.attach(db, "t", predicate=predicate)
    db.execute("update t set b = 'y'")
    keys = db.execute("select array_agg(k order by k) from pgcdc.commit_queue, unnest(keys) k").fetchone()[0]
    assert keys == ["{1,x}", "{1,y}"]


def test_composite_uuid_and_text_keys(db: psycopg.Connection) -> None:
    db.execute("create table c (region text, n int, v text, primary key (region, n))")
    db.execute("create table u (id uuid primary key, v text)")
    db.execute("create table s (code text primary key, v text)")
    for name in ("c", "u", "s"):
        capture.attach(db, name)
    u1 = uuid.UUID("00000000-0000-0000-0000-000000000001")
    db.execute("insert into c values ('eu,\"west\"', 1, 'x'), ('us', 2, 'y')")
    db.execute("insert into u values (%s, 'x')", (u1,))
    db.execute("insert into s values ('a b', 'x'), ('O''Hara', 'y')")
    got = events(db)
    assert got[0] == ("I", "public.c", sorted(['{"eu,\\"west\\"",1}', "{us,2}"]))
    assert got[1] == ("I", "public.u", [str(u1)])
    assert got[2] == ("I", "public.s", ["O'Hara", "a b"])
    # the composite text form decodes back to the exact values
    keys = db.execute("select (k::text[])[1], (k::text[])[2]::int from pgcdc.commit_queue q, unnest(q.keys) k "
                      "where q.table_id = (select table_id from pgcdc.attached where relid = 'c'::regclass) "
                      "order by 1").fetchall()
    assert keys == [('eu,"west"', 1), ("us", 2)]


def test_timestamp_keys_do_not_depend_on_the_writers_datestyle(db: psycopg.Connection) -> None:
    db.execute("create table t (at timestamptz primary key)")
    capture.attach(db, "t")
    db.execute("set datestyle = 'SQL, DMY'")
    db.execute("set timezone = 'Asia/Tokyo'")
    db.execute("insert into t values ('2024-03-04 05:06:07+00')")
    db.execute("reset datestyle")
    db.execute("reset timezone")
    (key,) = db.execute("select keys[1] from pgcdc.commit_queue").fetchone()
    assert db.execute("select %s::timestamptz = '2024-03-04 05:06:07+00'", (key,)).fetchone()[0]


def test_truncate_is_one_event_without_keys(db: psycopg.Connection) -> None:
    db.execute("create table t (id int primary key)")
    capture.attach(db, "t")
    db.execute("insert into t values (1)")
    db.execute("truncate t")
    assert events(db) == [("I", "public.t", ["1"]), ("T", "public.t", None)]


def test_large_statement_is_split_into_bounded_chunks(db: psycopg.Connection) -> None:
    db.execute("create table t (id int primary key)")
    capture.attach(db, "t")
    db.execute("insert into t select generate_series(1, 25000)")
    sizes = [r[0] for r in db.execute("select cardinality(keys) from pgcdc.commit_queue order by 1")]
    assert sizes == [5000, 10000, 10000]
    assert db.execute("select count(distinct k) from pgcdc.commit_queue, unnest(keys) k").fetchone()[0] == 25000


def test_predicate_filters_rows_but_keeps_rows_leaving_it(db: psycopg.Connection) -> None:
    db.execute("create table t (id int primary key, status text)")
    capture.attach(db, "t", predicate="status <> 'draft'")
    db.execute("insert into t values (1, 'draft'), (2, 'live'), (3, 'live')")
    db.execute("update t set status = 'draft' where id = 2")  # leaves the predicate: still captured
    db.execute("update t set status = 'draft' where id = 1")  # never matched: not captured
    db.execute("delete from t where id = 1")
    assert events(db) == [("I", "public.t", ["2", "3"]), ("U", "public.t", ["2"])]


def test_bad_predicates_are_refused(db: psycopg.Connection) -> None:
    db.execute("create table t (id int primary key, status text)")
    for bad, why in [("nocol = 1", "nocol"), ("status", "boolean"), ("true; drop table t", "one SQL expression"),
                     ("true -- x", "one SQL expression")]:
        with pytest.raises(TableError, match=why):
            capture.attach(db, "t", predicate=bad)
    assert capture.list_attached(db) == []
    assert db.execute("select count(*) from pg_trigger where tgrelid = 't'::regclass").fetchone()[0] == 0


def test_table_without_primary_key_is_refused_with_a_way_out(db: psycopg.Connection) -> None:
    db.execute("create table t (a int not null, b text)")
    with pytest.raises(TableError, match=r"table public.t has no primary key; add a primary key, or name a unique key"):
        capture.attach(db, "t")
    with pytest.raises(TableError, match="have no unique index"):
        capture.attach(db, "t", key=["a"])
    with pytest.raises(TableError, match="not all found"):
        capture.attach(db, "t", key=["nope"])
    db.execute("create unique index on t (a)")
    assert capture.attach(db, "t", key=["a"]).key_columns == ["a"]
    db.execute("insert into t values (7, 'x')")
    assert events(db) == [("I", "public.t", ["7"])]


def test_unknown_table_and_non_table(db: psycopg.Connection) -> None:
    with pytest.raises(TableError, match="table public.nope not found"):
        capture.attach(db, "public.nope")
    db.execute("create view v as select 1 as id")
    with pytest.raises(TableError, match="is not a table"):
        capture.attach(db, "v")


def test_detach_stops_capture(db: psycopg.Connection) -> None:
    db.execute("create table t (id int primary key)")
    capture.attach(db, "t")
    assert capture.detach(db, "t") is True
    db.execute("insert into t values (1)")
    assert db.execute("select count(*) from pgcdc.commit_queue").fetchone()[0] == 0
    assert db.execute("select count(*) from pg_trigger where tgrelid = 't'::regclass").fetchone()[0] == 0
    assert capture.detach(db, "t") is False


def test_reinstall_is_idempotent_and_keeps_attachments_and_events(db: psycopg.Connection) -> None:
    db.execute("create table t (id int primary key)")
    t = capture.attach(db, "t", shard=3)
    db.execute("insert into pgcdc.consumer_state (consumer, table_id, target, watermark, batch) "
               "values ('c', %s, '/x', '1'::xid8, 1)", (t.table_id,))  # a consumer still needs every event
    db.execute("insert into t values (1)")
    assert capture.install(db) == (capture.SCHEMA_VERSION, capture.SCHEMA_VERSION)
    db.execute("insert into t values (2)")
    assert [t.shard for t in capture.list_attached(db)] == [3]
    assert db.execute("select array_agg(keys[1] order by txid), array_agg(distinct shard) "
                      "from pgcdc.commit_queue").fetchone() == (["1", "2"], [3])


def test_mismatched_schema_version_is_refused(db: psycopg.Connection) -> None:
    db.execute("update pgcdc.meta set value = '999' where key = 'schema_version'")
    with pytest.raises(SchemaError, match="schema version 999 .* upgrade the pgcdc package"):
        capture.list_attached(db)
    with pytest.raises(SchemaError, match="newer than this package"):
        capture.install(db)
    db.execute("update pgcdc.meta set value = '0' where key = 'schema_version'")
    with pytest.raises(SchemaError, match="run `pgcdc install` to upgrade"):
        capture.list_attached(db)
    assert capture.install(db) == (0, capture.SCHEMA_VERSION)


def test_not_installed_is_a_clear_error(conn: psycopg.Connection) -> None:
    with pytest.raises(SchemaError, match="pgcdc is not installed in database .*; run `pgcdc install`"):
        capture.list_attached(conn)


def test_writer_with_minimal_privileges(db: psycopg.Connection, dsn: str) -> None:
    db.execute("create table t (id int primary key, v text)")
    capture.attach(db, "t")
    db.execute("create role app_writer login password 'w-pass'")
    db.execute("grant select, insert, update, delete, truncate on t to app_writer")
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    writer = make_conninfo(**(conninfo_to_dict(dsn) | {"user": "app_writer", "password": "w-pass"}))
    try:
        with psycopg.connect(writer, autocommit=True) as w:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                w.execute("select * from pgcdc.commit_queue")
            w.execute("insert into t values (1, 'a'), (2, 'b')")
            w.execute("update t set v = 'c' where id = 1")
            w.execute("delete from t where id = 2")
            w.execute("truncate t")
        assert [e[0] for e in events(db)] == ["I", "U", "D", "T"]
    finally:
        db.execute("drop owned by app_writer")
        db.execute("drop role app_writer")


def test_hostile_identifiers(db: psycopg.Connection) -> None:
    db.execute('create schema "Sales Dept"')
    db.execute('create table "Sales Dept"."Order ""Items""; drop table x" ("Id Key" int, "select" text, '
               '"MixedCase" int, primary key ("Id Key", "select"))')
    name = '"Sales Dept"."Order ""Items""; drop table x"'
    t = capture.attach(db, name, predicate='"MixedCase" > 0')
    assert t.key_columns == ["Id Key", "select"]
    db.execute(f"insert into {name} values (1, 'it''s', 5), (2, 'no', 0)")
    db.execute(f'update {name} set "Id Key" = 3 where "Id Key" = 1')
    assert events(db) == [("I", name, ["{1,it's}"]), ("U", name, ["{1,it's}", "{3,it's}"])]
    assert capture.detach(db, name)


def test_uninstall_removes_triggers_and_schema(db: psycopg.Connection) -> None:
    db.execute("create table t (id int primary key)")
    capture.attach(db, "t")
    assert capture.uninstall(db) == ["public.t"]
    assert db.execute("select to_regnamespace('pgcdc')").fetchone()[0] is None
    db.execute("insert into t values (1)")  # writes keep working
    assert capture.installed_version(db) is None


def test_cli_attach_list_status(db: psycopg.Connection, dsn: str, tmp_path: Path,
                                capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(f"[source]\ndsn = \"{dsn}\"\n[target]\nroot = \"{tmp_path}\"\n")
    db.execute("create table orders (id int primary key, status text)")
    assert main(["--config", str(cfg), "attach", "orders", "--where", "status <> 'x'", "--shard", "2"]) == 0
    assert "attached public.orders (key id, where (status <> 'x'::text), shard 2)" in capsys.readouterr().out
    db.execute("insert into orders values (1, 'a'), (2, 'b')")
    assert main(["--config", str(cfg), "list"]) == 0
    assert "public.orders  id   all      (status <> 'x'::text)  2" in capsys.readouterr().out
    assert main(["--config", str(cfg), "status"]) == 1  # attention needed: a scheduler sees it too
    out = capsys.readouterr().out
    assert "public.orders" in out and "never synced: public.orders" in out and out.startswith("status: ATTENTION")
    assert main(["--config", str(cfg), "attach", "missing_table"]) == 2
    assert "table missing_table not found" in capsys.readouterr().err


def test_cli_install_detach_uninstall(conn: psycopg.Connection, dsn: str, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(f"[source]\ndsn = \"{dsn}\"\n[target]\nroot = \"{tmp_path}\"\n")
    run = lambda *a: main(["--config", str(cfg), *a])  # noqa: E731
    assert run("install") == 0
    assert f"installed pgcdc schema version {capture.SCHEMA_VERSION}" in capsys.readouterr().out
    assert run("install") == 0
    assert "already installed" in capsys.readouterr().out
    conn.execute("create table t (id int primary key)")
    assert run("attach", "t") == 0 and run("detach", "t") == 0
    assert "detached public.t; its changes are no longer captured" in capsys.readouterr().out
    assert run("uninstall") == 2 and "--yes" in capsys.readouterr().err
    assert capture.installed_version(conn) == capture.SCHEMA_VERSION
    assert run("uninstall", "--yes") == 0
    assert "pgcdc removed from database" in capsys.readouterr().out
    assert capture.installed_version(conn) is None


@pytest.mark.parametrize("ddl, column, why", [
    ("create table t (k float8 primary key)", "k", "extra_float_digits"),
    ("create table t (k real primary key)", "k", "extra_float_digits"),
    ("create domain money_key as double precision; create table t (k money_key primary key)", "k", "extra_float_digits"),
    ("create extension if not exists citext; create table t (k citext primary key)", "k", "case-insensitively"),
    ("create collation if not exists ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false); "
     "create table t (id int, k text collate ci, primary key (id, k))", "k", "nondeterministic"),
])
def test_key_types_without_an_exact_text_form_are_refused(db: psycopg.Connection, ddl: str, column: str,
                                                          why: str) -> None:
    """A float key queued as text under extra_float_digits = 0 names another value (a row that
    exists looks gone, so it would be deleted downstream); citext and nondeterministic
    collations compare differently from their text."""
    try:
        db.execute(ddl)
    except psycopg.errors.FeatureNotSupported as exc:  # (an ICU-less build: the case cannot arise there)
        pytest.fail(f"this PostgreSQL cannot build the case: {exc}")
    with pytest.raises(TableError, match=f"key column {column} of table public.t has type .*{why}.*--key"):
        capture.attach(db, "t")
    assert capture.list_attached(db) == []
    assert db.execute("select count(*) from pg_trigger where tgrelid = 't'::regclass").fetchone()[0] == 0


def test_float_column_beside_an_exact_key_is_fine(db: psycopg.Connection) -> None:
    db.execute("create table t (id int primary key, x float8 unique not null)")
    with pytest.raises(TableError, match="extra_float_digits"):
        capture.attach(db, "t", key=["x"])
    assert capture.attach(db, "t").key_columns == ["id"]


@pytest.mark.parametrize("ddl, name, refusal", [
    ("create table p (id int primary key) partition by range (id); "
     "create table t partition of p for values from (0) to (100)", "t",
     "table public.t is a partition of public.p; attach the partitioned table instead: `pgcdc attach public.p`"),
    ("create table p (id int, k int, primary key (id, k)) partition by range (id); "
     "create table t partition of p for values from (0) to (100) partition by list (k); "
     "create table t_1 partition of t for values in (1)", "t_1",
     "table public.t_1 is a partition of public.p; attach the partitioned table instead"),
    ("create table t (id int primary key); create table c () inherits (t)", "t",
     "table public.t is part of an inheritance tree"),
    ("create table p (id int primary key); create table t (id int primary key) inherits (p)", "t",
     "table public.t is part of an inheritance tree"),
])
def test_partitions_and_inherited_tables_are_refused(db: psycopg.Connection, ddl: str, name: str,
                                                     refusal: str) -> None:
    """A partition is captured with its partitioned table (statements aimed at the root fire only
    the root's statement triggers); in an inheritance tree statements aimed at a child bypass the
    parent's: capture would silently miss changes."""
    db.execute(ddl)
    with pytest.raises(TableError, match=re.escape(refusal)):
        capture.attach(db, name)
    assert capture.list_attached(db) == []
