"""Columns chosen (`attach --columns` / `--exclude-columns`, docs/columns.md): a column left out
never reaches Delta, and no statement pgcdc sends names it: the reader `pgcdc grant` made may
not even select it, and the server's log of every statement the reader ran never names it.

The oracle reads PostgreSQL with psycopg and Delta with the plain Spark session.
"""

from __future__ import annotations

import re

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from pgcdc.errors import TableError
from pgcdc.source import access, capture, schemas
from pgcdc.source.columns import table_columns
from pgcdc.source.db import connect

PASSWORD = "c0lumns-Pw"
SECRET = "ssn_secret"  # a name no statement of the reader may hold


def _reader(db: psycopg.Connection, dsn: str) -> tuple[str, str]:
    """A login role made a reader by `pgcdc grant --reader`, logging every statement it runs."""
    role = "colreader_" + db.info.dbname.replace("pgcdc_", "")
    db.execute(sql.SQL("create role {} login password {}").format(sql.Identifier(role), sql.Literal(PASSWORD)))
    db.execute(sql.SQL("alter role {} set log_statement = 'all'").format(sql.Identifier(role)))
    capture.grant(db, role, "reader")
    parts = conninfo_to_dict(dsn)
    parts.update(user=role, password=PASSWORD)
    return role, make_conninfo(**parts)


def _server_log(pg_server) -> str:
    if pg_server.local is None:
        pytest.skip("reading the server's statement log needs the local test server (PGCDC_TEST_DSN is set)")
    return (pg_server.local.datadir / "server.log").read_text(errors="replace")


def _pg_rows(db: psycopg.Connection, columns: str) -> set[tuple]:
    return set(db.execute(f"select {columns} from app.people").fetchall())


def _delta_rows(syncer, columns: list[str]) -> set[tuple]:
    return {tuple(r) for r in syncer.delta("app.people").select(*columns).collect()}


def test_a_left_out_column_never_reaches_delta_nor_any_statement(db: psycopg.Connection, dsn: str, pg_server,
                                                                syncer) -> None:
    """Copy in chunks, batches through Spark and through the driver, verify and status, all as
    the reader: the left-out columns are not in Delta, the reader cannot select them, and the
    server's log of the reader's statements never names them (it names the table's other
    columns, so the check can fail)."""
    from pgcdc.checks import verify as verify_mod
    from pgcdc.checks.status import status_report

    db.execute("create schema app")
    db.execute(f"create table app.people (id int primary key, name text, {SECRET} text, notes text, v int)")
    db.execute("insert into app.people select i, 'n' || i, 'SSN-' || i, 'notes ' || i, i from generate_series(1, 500) i")
    t = capture.attach(db, "app.people", exclude_columns=[SECRET, "notes"])
    assert t.choice == f"all but {SECRET}, notes"
    role, reader_dsn = _reader(db, dsn)
    start = len(_server_log(pg_server))
    syncer.dsn = reader_dsn
    syncer.run(consumer="cols", copies={"chunk_rows": 150, "chunk_seconds": 0})  # a copy in 4 chunks
    db.execute(f"update app.people set name = 'm' || id, {SECRET} = 'X' where id % 7 = 0")
    db.execute("delete from app.people where id > 480")
    syncer.run(consumer="cols", driver_keys=0)  # a batch read by Spark
    db.execute("insert into app.people values (1000, 'new', 'SSN-new', 'n', 1)")
    db.execute("update app.people set v = -v where id < 5")
    syncer.run(consumer="cols")  # a small batch, read into the driver
    assert syncer.delta("app.people").columns == ["id", "name", "v"]
    assert _delta_rows(syncer, ["id", "name", "v"]) == _pg_rows(db, "id, name, v")
    with connect(reader_dsn) as reader:
        healthy = status_report(reader)[1]
        tables = capture.list_attached(reader)
        assert access.readable_left_out(reader) == []
    with connect(reader_dsn, reader=True) as reader:
        results = verify_mod.verify(syncer.spark, reader, str(syncer.root), tables)
    assert healthy and [r.equal for r in results] == [True], [r.line() for r in results]
    logged = _server_log(pg_server)[start:]
    with connect(reader_dsn) as reader:  # (after the log is read: this statement names the column)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            reader.execute(f"select {SECRET} from app.people")
        assert reader.execute("select count(*) from app.people").fetchone()[0] == 481
    statements = [line for line in logged.splitlines() if "statement:" in line or "execute" in line]
    assert any("app.people" in line and '"name"' in line or "app.people" in line and " name" in line
               for line in statements), "the reader's statements were not logged"
    assert not re.search(rf"{SECRET}|notes", logged), [line for line in statements if SECRET in line or "notes" in line]
    # the superuser may read them: `pgcdc check` says so for such a role
    assert access.readable_left_out(db) == [("app.people", [SECRET, "notes"])]


def test_columns_keeps_the_key_and_a_column_added_later_is_left_out(db: psycopg.Connection, syncer) -> None:
    db.execute("create schema app")
    db.execute("create table app.people (id int primary key, name text, ssn text, v int)")
    db.execute("insert into app.people select i, 'n' || i, 's' || i, i from generate_series(1, 50) i")
    t = capture.attach(db, "app.people", columns=["name"])
    assert t.choice == "only name" and [c.name for c in table_columns(db, "app.people")] == ["id", "name"]
    syncer.run()
    db.execute("alter table app.people add column extra text default 'e'")
    db.execute("alter table app.people rename column name to full_name")  # a kept column renamed stays kept
    db.execute("update app.people set full_name = 'x' where id = 3")
    syncer.run()
    assert syncer.delta("app.people").columns == ["id", "full_name"]
    assert {tuple(r) for r in syncer.delta("app.people").collect()} == set(
        db.execute("select id, full_name from app.people").fetchall())


def test_exclude_columns_follows_renames_and_lands_a_column_added_later(db: psycopg.Connection, dsn: str,
                                                                        syncer) -> None:
    """A left-out column renamed stays out; a column added later lands, and the reader (whose
    grant names columns) may read it: the DDL's event trigger grants it."""
    db.execute("create schema app")
    db.execute("create table app.people (id int primary key, name text, ssn text)")
    db.execute("insert into app.people select i, 'n' || i, 's' || i from generate_series(1, 20) i")
    capture.attach(db, "app.people", exclude_columns=["ssn"])
    _, reader_dsn = _reader(db, dsn)
    syncer.dsn = reader_dsn
    syncer.run()
    db.execute("alter table app.people rename column ssn to national_id")
    db.execute("alter table app.people add column city text default 'c'")
    db.execute("alter table app.people add column ssn text default 'again'")  # the old name, a new column: still out
    syncer.run()
    assert syncer.delta("app.people").columns == ["id", "name", "city"]
    assert _delta_rows(syncer, ["id", "name", "city"]) == _pg_rows(db, "id, name, city")
    assert capture.list_attached(db)[0].choice == "all but national_id, ssn"


def test_a_choice_that_does_not_fit_is_refused_and_changes_nothing(db: psycopg.Connection) -> None:
    db.execute("create schema app")
    db.execute("create table app.people (id int primary key, name text, ssn text, region text)")
    capture.attach(db, "app.people")
    cases = [
        (dict(exclude_columns=["sn"]), r"table app.people has no column sn"),
        (dict(exclude_columns=["id"]), r"id is a key column of app.people: it cannot be left out"),
        (dict(columns=["name"], exclude_columns=["ssn"]), r"not both"),
        (dict(exclude_columns=["region"], predicate="region = 'eu'"),
         r"the predicate of app.people reads column region, which the column choice leaves out"),
        (dict(columns=["name"], delta_partition_by="region"), r"partitions its Delta table by column region"),
        (dict(columns=[]), r"no column named"),
    ]
    for options, message in cases:
        with pytest.raises(TableError, match=message):
            capture.attach(db, "app.people", **options)
    t = capture.list_attached(db)[0]
    assert t.column_mode is None and t.predicate is None and t.delta_partition_by is None


def test_changing_the_choice_copies_the_table_with_the_new_columns(db: psycopg.Connection, syncer) -> None:
    """Leaving a column out of a table synced whole: the next run copies it, and Delta's current
    version no longer holds the column (older versions do, until VACUUM: docs/columns.md)."""
    db.execute("create schema app")
    db.execute("create table app.people (id int primary key, name text, ssn text)")
    db.execute("insert into app.people select i, 'n' || i, 's' || i from generate_series(1, 30) i")
    capture.attach(db, "app.people")
    syncer.run()
    assert "ssn" in syncer.delta("app.people").columns
    capture.attach(db, "app.people", exclude_columns=["ssn"])
    db.execute("update app.people set name = 'z' where id = 1")
    report = syncer.run()["app.people"]
    assert report.copied
    assert syncer.delta("app.people").columns == ["id", "name"]
    assert _delta_rows(syncer, ["id", "name"]) == _pg_rows(db, "id, name")
    capture.attach(db, "app.people")  # every column again
    syncer.run()
    assert _delta_rows(syncer, ["id", "name", "ssn"]) == _pg_rows(db, "id, name, ssn")


def test_a_schema_attach_leaves_the_columns_out_of_every_table_that_has_them(db: psycopg.Connection) -> None:
    db.execute("create schema app")
    db.execute("create table app.a (id int primary key, ssn text, v int)")
    db.execute("create table app.b (id int primary key, v int)")
    db.execute("create table app.c (id int primary key, ssn text)")
    capture.attach(db, "app.c")  # attached before: it leaves ssn out too now
    done = schemas.attach_schema(db, "app", exclude_columns=["ssn"])
    by_name = {t.name: t for t in capture.list_attached(db)}
    assert by_name["app.a"].choice == "all but ssn" and by_name["app.b"].choice == "all but ssn"
    assert by_name["app.c"].choice == "all but ssn" and done.matched == {"ssn"}
    assert sorted(t.name for t in done.attached) == ["app.a", "app.b", "app.c"]


def test_a_schemas_exclusion_holds_for_columns_and_tables_that_come_later(db: psycopg.Connection, syncer) -> None:
    """`attach --schema app --exclude-columns ssn`: a table of the schema without ssn that gets
    one later, and a table created later that `pgcdc status`'s advice (`attach --schema app`,
    without the option) attaches, both leave ssn out; re-attaching changes no kept column, so
    nothing is copied again."""
    from pgcdc.checks.verify import verify

    db.execute("create schema app")
    db.execute("create table app.a (id int primary key, ssn text, v int)")
    db.execute("create table app.b (id int primary key, v int)")
    db.execute("insert into app.a select i, 'ssn' || i, i from generate_series(1, 10) i")
    db.execute("insert into app.b select i, i from generate_series(1, 10) i")
    schemas.attach_schema(db, "app", exclude_columns=["ssn"])
    syncer.run()
    db.execute("alter table app.b add column ssn text")
    db.execute("update app.b set ssn = 'ssn' || id")
    db.execute("create table app.d (id int primary key, ssn text, v int)")
    db.execute("insert into app.d select i, 'ssn' || i, i from generate_series(1, 5) i")
    problems = schemas.uncaptured_problems(db)
    assert problems == ["table app.d in schema app (attached with --schema) is not captured: it came after the schema "
                        "was attached; run `pgcdc attach --schema app` (or `pgcdc attach app.d`, which leaves out ssn "
                        "as the schema does)"]
    done = schemas.attach_schema(db, "app")  # (the advice, without --exclude-columns)
    assert [t.name for t in done.attached] == ["app.d"] and sorted(done.already) == ["app.a", "app.b"]
    assert capture.attach(db, "app.d").choice == "all but ssn"  # (a table attached alone keeps it too)
    lines = len(syncer.lines)
    syncer.run()
    assert {t: syncer.delta(t).columns for t in ("app.a", "app.b", "app.d")} == \
        {"app.a": ["id", "v"], "app.b": ["id", "v"], "app.d": ["id", "v"]}
    assert not any("copying the table again" in line for line in syncer.lines[lines:] if "app.b" not in line)
    tables = [t for t in capture.list_attached(db)]
    assert all(c.equal for c in verify(syncer.spark, db, str(syncer.root), tables, "test"))


def test_cli_attach_list_and_check_show_the_choice(db: psycopg.Connection, dsn: str, tmp_path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from pgcdc.cli.main import main

    cfg = tmp_path / "c.toml"
    cfg.write_text(f"[source]\ndsn = \"{dsn}\"\n[target]\nroot = \"{tmp_path}\"\n")
    db.execute("create table staff (id int primary key, name text, password text, picture bytea)")
    assert main(["--config", str(cfg), "attach", "staff", "--exclude-columns", "password, picture"]) == 0
    assert ("attached public.staff (key id, all but password, picture (no other column is read))"
            in capsys.readouterr().out)
    assert main(["--config", str(cfg), "list"]) == 0
    assert "public.staff  id   all but password, picture" in capsys.readouterr().out
    assert main(["--config", str(cfg), "check"]) == 0  # (the test's role is a superuser: it may read them)
    assert ("note: public.staff leaves out password, picture, but role postgres may read them"
            in capsys.readouterr().out)
    assert main(["--config", str(cfg), "attach", "staff", "--columns", "nam"]) == 2
    assert "table public.staff has no column nam" in capsys.readouterr().err
