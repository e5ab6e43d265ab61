"""Whole schemas and consumers that own their tables, against real PostgreSQL (and Spark +
Delta for the runs): `attach --schema` attaches what it can and names each refusal, a table
created later is named until attached, a consumer takes only the tables its `tables` entries
take in, and `status` names per consumer each table it should sync but never did."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest

from fixtures.ingest import Syncer
from pgcdc.cli.main import main
from pgcdc.errors import ConfigError, TableError
from pgcdc.source import capture
from pgcdc.source.selection import pattern
from pgcdc.checks.status import status_data


def _config(tmp_path: Path, dsn: str, consumer: str = "default", tables: list[str] | None = None) -> Path:
    cfg = tmp_path / f"{consumer}.toml"
    cfg.write_text(f'consumer = "{consumer}"\ntables = {json.dumps(tables or [])}\n'
                   f'[source]\ndsn = "{dsn}"\n[target]\nroot = "{tmp_path / "lake"}"\n')
    return cfg


def test_attach_schema_attaches_what_it_can_names_each_refusal_and_each_later_table(
        db: psycopg.Connection, dsn: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db.execute("create schema app; create schema other")
    db.execute("create table app.a (id int primary key, v text); create table app.link (x int, y text, "
               "primary key (x, y)); create table app.nopk (v text); create table app.fl (k float8 primary key); "
               "create table app.part (id int primary key) partition by range (id); "
               "create table app.part_1 partition of app.part for values from (1) to (10); "
               "create table app.done (id int primary key); create table other.o (id int primary key); "
               "create view app.v as select 1 as one")
    capture.attach(db, "app.done", predicate="id > 0")
    cfg = _config(tmp_path, dsn)
    run = lambda *a: main(["--config", str(cfg), *a])  # noqa: E731

    assert run("attach", "--schema", "app") == 1  # some were refused: a scheduler or a person sees it
    out = capsys.readouterr().out
    assert "attached app.a (key id)" in out and "attached app.link (key x, y)" in out
    assert "refused app.nopk: table app.nopk has no primary key; add a primary key" in out
    assert "refused app.fl: key column k of table app.fl has type double precision" in out
    assert "attached app.part (key id)" in out and "app.part_1" not in out  # (a partition: with its root)
    assert "schema app: 3 table(s) attached, 1 already attached, 2 refused" in out
    attached = {t.name: t for t in capture.list_attached(db)}
    assert sorted(attached) == ["app.a", "app.done", "app.link", "app.part"]  # nothing of other schemas, no view
    assert attached["app.done"].predicate is not None  # an attached table keeps its options

    db.execute("create table app.later (id int primary key)")
    data = status_data(db)
    later = [p for p in data["problems"] if "app.later" in p]
    assert later and "run `pgcdc attach --schema app`" in later[0] and not data["healthy"]
    assert not any("app.nopk" in p or "app.fl" in p or "other.o" in p for p in data["problems"])  # (named at attach)
    assert run("attach", "--schema", "app") == 1
    assert "attached app.later (key id)" in capsys.readouterr().out
    assert not any("app.later" in p and "not captured" in p for p in status_data(db)["problems"])

    assert run("attach", "--schema", "nope") == 2
    assert "schema nope not found" in capsys.readouterr().err
    assert run("attach", "app.a", "--schema", "app") == 2 and run("attach", "--schema", "app", "--key", "id") == 2
    assert run("detach", "--schema", "app") == 0
    assert capture.list_attached(db) == []
    db.execute("create table app.after (id int primary key)")  # no longer watched: not named
    assert not any("app.after" in p for p in status_data(db)["problems"])


def test_a_consumer_takes_only_the_tables_its_entries_take_in_and_status_names_what_it_never_synced(
        db: psycopg.Connection, spark, dsn: str, tmp_path: Path) -> None:
    db.execute("create schema app; create schema billing; create schema \"Mixed\"")
    for name in ("app.a", "app.b", "billing.inv", "billing.credit", '"Mixed"."Big"'):
        db.execute(f"create table {name} (id int primary key, v text)")
        db.execute(f"insert into {name} select i, 'x' from generate_series(1, 5) i")
        capture.attach(db, name)
    apps = Syncer(spark, dsn, tmp_path / "apps")
    bills = Syncer(spark, dsn, tmp_path / "bills")
    assert sorted(apps.run(consumer="apps", tables=["app.*", '"Mixed"."B*"'])) == ['"Mixed"."Big"', "app.a", "app.b"]
    assert sorted(bills.run(consumer="bills", tables=["billing.inv"])) == ["billing.inv"]
    assert not Path(apps.path("billing.inv")).exists() and not Path(bills.path("app.a")).exists()
    for t in ("app.a", "app.b", '"Mixed"."Big"'):
        apps.assert_equal(t)

    # billing.credit: no consumer takes it in; app.c: apps should sync it and never did
    db.execute("create table app.c (id int primary key)")
    capture.attach(db, "app.c")
    db.execute("update app.a set v = 'y' where id = 1")
    data = status_data(db)
    states = {(s["consumer"], s["table"]): s["state"] for s in data["synced"]}
    assert states[("apps", "app.c")] == "never synced" and states[("apps", "app.a")] == "behind"
    assert states[("apps", "app.b")] == "synced" and states[("bills", "billing.inv")] == "synced"
    assert ("bills", "app.c") not in states and ("apps", "billing.inv") not in states
    assert any(p.startswith("consumer apps has never synced app.c (its `tables` (app.*, \"Mixed\".\"B*\") take it in)")
               for p in data["problems"])
    assert any("never synced: billing.credit (no consumer's `tables` take it in" in p for p in data["problems"])
    assert not any("consumer bills" in p for p in data["problems"])

    apps.run(consumer="apps", tables=["app.*", '"Mixed"."B*"'])
    bills.run(consumer="bills", tables=["billing.*"])
    data = status_data(db)
    assert data["healthy"], data["problems"]
    assert {s["state"] for s in data["synced"]} == {"synced"}
    apps.assert_equal("app.c")
    bills.assert_equal("billing.credit")

    with pytest.raises(TableError, match=r"pattern shop\.\* takes in no attached table.*attach --schema shop"):
        apps.run(consumer="apps", tables=["app.*", "shop.*"])
    with pytest.raises(ConfigError, match="must be schema.table"):
        apps.run(consumer="apps", tables=["app*"])
    with pytest.raises(TableError, match="billing.nope not found"):
        apps.run(consumer="apps", tables=["billing.nope"])


def test_patterns_fold_unquoted_parts_and_keep_quoted_ones() -> None:
    p = pattern('App.Or*')
    assert p is not None and (p.schema, p.table) == ("app", "or*") and p.takes("app", "orders")
    q = pattern('"Sales"."Q.*"')
    assert q is not None and q.takes("Sales", "Q.1") and not q.takes("sales", "Q.1")
    assert pattern("app.orders") is None
    for bad in ("app*", '"a*b"', "a.b.c*", '"open.*', ".*"):
        with pytest.raises(ConfigError):
            pattern(bad)


def test_a_table_dropped_while_its_schema_is_attached_is_passed_over_and_the_schema_recorded(
        db: psycopg.Connection, monkeypatch: pytest.MonkeyPatch) -> None:
    from pgcdc.source import schemas

    db.execute("create schema app; create table app.a (id int primary key); create table app.b (id int primary key)")
    real = capture.attach

    def dropped_first(conn, table, **options):
        if table == "app.a":
            conn.execute("drop table app.a")
        return real(conn, table, **options)
    monkeypatch.setattr(capture, "attach", dropped_first)
    done = schemas.attach_schema(db, "app", exclude_columns=["ssn"])
    assert [t.name for t in done.attached] == ["app.b"] and done.refused == [] and done.left_out == ["ssn"]
    assert db.execute("select exclude_columns from pgcdc.attached_schema").fetchall() == [(["ssn"],)]


@pytest.mark.parametrize("guard", ["event trigger", "no event trigger"])
def test_a_followed_schema_attaches_new_tables_by_itself(db: psycopg.Connection, syncer: Syncer, guard: str) -> None:
    """`attach --schema app --follow-new`: a table created there later lands without a command
    (in its CREATE TABLE's transaction with the event trigger, at the next run without it), a
    column the schema leaves out stays out, a table without a primary key is named by status until
    one is added, and a partition detached into the schema becomes a table of its own."""
    from fixtures.ingest import disable_event_triggers
    from pgcdc.source import schemas

    db.execute("create schema app; create table app.a (id int primary key, v text, ssn text)")
    db.execute("create table app.p (id int, d int, primary key (id, d)) partition by list (d); "
               "create table app.p1 partition of app.p for values in (1); "
               "insert into app.p select i, 1 from generate_series(1, 5) i")
    if guard == "no event trigger":
        disable_event_triggers(db)
    done = schemas.attach_schema(db, "app", exclude_columns=["ssn"], follow_new=True)
    assert {t.name for t in done.attached} == {"app.a", "app.p"}
    syncer.run()
    db.execute("create table app.b (id int primary key, v text, ssn text)")
    db.execute("insert into app.b select i, 'b' || i, 'secret' from generate_series(1, 20) i")
    db.execute("create table app.nopk (v text)")
    if guard == "event trigger":  # attached in its CREATE TABLE's transaction
        assert "app.b" in {t.name for t in capture.list_attached(db)}
    syncer.run()
    assert sorted(r["id"] for r in syncer.delta("app.b").collect()) == list(range(1, 21))
    assert "ssn" not in syncer.delta("app.b").columns
    problems = [p for p in status_data(db)["problems"] if "not captured" in p]
    assert len(problems) == 1 and "app.nopk" in problems[0] and "run `pgcdc attach app.nopk` to see why" in \
        problems[0], problems
    db.execute("alter table app.nopk add column id int generated always as identity primary key")
    db.execute("insert into app.nopk (v) values ('x')")
    syncer.run()
    assert syncer.delta("app.nopk").count() == 1
    assert not [p for p in status_data(db)["problems"] if "not captured" in p]
    db.execute("alter table app.p detach partition app.p1")
    syncer.run()
    assert syncer.delta("app.p1").count() == 5 and syncer.delta("app.p").count() == 0
