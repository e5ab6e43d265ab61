"""No role gains a privilege through pgcdc (docs/security.md).

Each attack of the security issue, played against a real PostgreSQL with password
authentication: pgcdc installed by the superuser, an application role `app` that owns its
tables (and may create types, casts, operators and functions in its own schema), and a
reader role made by `pgcdc grant --reader`. Each attack must gain nothing: `app` never
becomes superuser, code it wrote never runs with another role's rights (its functions
record the role they run as), and the application's statements still succeed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from pgcdc.source import capture, consumers
from pgcdc.errors import BusyError, SchemaError, TableError
from pgcdc.checks.status import status_report

PASSWORD = "s3cret-Pw"


@dataclass
class Roles:
    """The test's roles (cluster-wide names, unique per test database) and their DSNs."""

    app: str
    reader: str
    app_dsn: str
    reader_dsn: str


def _dsn(dsn: str, user: str) -> str:
    parts = conninfo_to_dict(dsn)
    parts.update(user=user, password=PASSWORD)
    return make_conninfo(**parts)


@pytest.fixture
def roles(db: psycopg.Connection, dsn: str) -> Roles:
    """`app` owns schema app (and may create in it); `reader` is made by pgcdc grant --reader."""
    suffix = db.info.dbname.replace("pgcdc_", "")
    app, reader = f"app_{suffix}", f"reader_{suffix}"
    for role in (app, reader):
        db.execute(sql.SQL("create role {} login password {}").format(sql.Identifier(role), sql.Literal(PASSWORD)))
    db.execute(sql.SQL("create schema app authorization {}").format(sql.Identifier(app)))
    # a record of the role every function `app` writes runs as (anyone may add to it)
    db.execute("create table public.calls (who text, what text)")
    db.execute("grant insert, select on public.calls to public")
    capture.grant(db, reader, "reader")
    return Roles(app, reader, _dsn(dsn, app), _dsn(dsn, reader))


def _as(dsn: str) -> psycopg.Connection:
    return psycopg.connect(dsn, autocommit=True)


def _superuser(db: psycopg.Connection, role: str) -> bool:
    return db.execute("select rolsuper from pg_roles where rolname = %s", (role,)).fetchone()[0]


def _calls(db: psycopg.Connection) -> list[tuple[str, str]]:
    return db.execute("select who, what from public.calls").fetchall()


def _evil(what: str) -> str:
    """The body of a function `app` writes: record who runs it, then try to become superuser."""
    return (f"begin insert into public.calls values (current_user, '{what}'); "
            f"begin execute format('alter role %I superuser', session_user); exception when others then null; end; ")


def _app_table(db: psycopg.Connection, roles: Roles, ddl: str, attach: dict | None = None) -> capture.AttachedTable:
    """`app` creates a table; the installer attaches it."""
    with _as(roles.app_dsn) as app:
        app.execute(ddl)
    return capture.attach(db, "app.t", **(attach or {}))


def _events(db: psycopg.Connection) -> list[tuple[str, list[str] | None]]:
    return db.execute("select op, keys from pgcdc.commit_queue order by txid, op").fetchall()


def test_a_shadowing_operator_is_never_reached_by_capture(db: psycopg.Connection, roles: Roles) -> None:
    """Attack 1: app's own `=` (text, text) first on its search_path, then a write."""
    _app_table(db, roles, "create table app.t (id int primary key, v text)")
    with _as(roles.app_dsn) as app:
        app.execute(f"create function app.eq(text, text) returns boolean language plpgsql as $$ {_evil('op')} "
                    "return $1 operator(pg_catalog.=) $2; end $$")
        app.execute("create operator app.= (leftarg = text, rightarg = text, function = app.eq)")
        app.execute("set search_path = app, pg_catalog")
        app.execute("insert into app.t values (1, 'a')")
        app.execute("update app.t set v = 'b'")
    assert not _superuser(db, roles.app) and _calls(db) == []
    assert _events(db) == [("I", ["1"]), ("U", ["1"])]


def test_a_users_cast_to_text_is_never_run_by_capture_nor_by_the_reader(db: psycopg.Connection, roles: Roles,
                                                                          syncer) -> None:
    """Attack 2: a key of app's enum with app's cast from it to text; values of its type too."""
    with _as(roles.app_dsn) as app:
        app.execute("create type app.k as enum ('a', 'b', 'c')")
        app.execute(f"create function app.k_text(app.k) returns text language plpgsql as $$ {_evil('cast')} "
                    "return 'forged'; end $$")
        app.execute("create cast (app.k as text) with function app.k_text(app.k)")
    _app_table(db, roles, "create table app.t (id app.k primary key, v app.k)")
    with _as(roles.app_dsn) as app:
        app.execute("insert into app.t values ('a', 'b'), ('b', 'c')")
        app.execute("update app.t set v = 'a' where id = 'b'")
    assert not _superuser(db, roles.app) and _calls(db) == []
    assert _events(db) == [("I", ["a", "b"]), ("U", ["b"])]
    syncer.dsn = roles.reader_dsn
    syncer.run()
    assert _calls(db) == []  # the reader's reads and the copy took the values' text without the cast
    assert sorted(tuple(r) for r in syncer.delta("app.t").collect()) == [("a", "b"), ("b", "a")]


def test_a_users_cast_from_text_to_a_key_type_stops_the_sync_naming_it(db: psycopg.Connection, roles: Roles,
                                                                        syncer) -> None:
    """Keys are read back from the queue's text: a cast from text to the key's type, written by the
    table's owner, would run with the reader's rights. The table's sync stops, naming it."""
    with _as(roles.app_dsn) as app:
        app.execute("create type app.k as enum ('a', 'b')")
        app.execute(f"create function app.text_k(text) returns app.k language plpgsql as $$ {_evil('decode')} "
                    "return 'a'; end $$")
        app.execute("create cast (text as app.k) with function app.text_k(text)")
    _app_table(db, roles, "create table app.t (id app.k primary key)")
    with _as(roles.app_dsn) as app:
        app.execute("insert into app.t values ('a')")
    syncer.dsn = roles.reader_dsn
    with pytest.raises(TableError, match=r"key of app.t is read back from text through a cast text to app.k "
                                         r"\(function app.text_k\(text\)\)"):
        syncer.run()
    assert _calls(db) == []


def test_capture_functions_run_only_for_their_table_and_not_for_public(db: psycopg.Connection, roles: Roles) -> None:
    """Attack 2's second half: a temp table whose trigger executes another table's capture function."""
    t = _app_table(db, roles, "create table app.t (id int primary key)")
    fn = f"pgcdc.capture_{t.table_id}"
    owner, acl, config = db.execute("select proowner::regrole::text, proacl::text, proconfig from pg_proc "
                                    "where oid = %s::regprocedure", (fn + "()",)).fetchone()
    assert owner == "pgcdc_capture" and acl == "{pgcdc_capture=X/pgcdc_capture}"  # no EXECUTE for PUBLIC
    assert "search_path=pg_catalog, pg_temp" in config
    for dsn in (roles.app_dsn, roles.reader_dsn):  # (the reader has USAGE on schema pgcdc)
        with _as(dsn) as other:
            other.execute("create temp table x (id int)")
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                other.execute(f"create trigger x after insert on x referencing new table as pgcdc_new "
                              f"for each statement execute function {fn}()")
    # fired for another table by a superuser's mistake, it reads nothing of it (and fails nothing)
    db.execute("create table other (secret text)")
    db.execute(f"create trigger x after insert on other referencing new table as pgcdc_new "
               f"for each statement execute function {fn}()")
    db.execute("insert into other values ('s3')")
    assert _events(db) == [("T", None)]


def test_a_column_name_cannot_break_out_of_the_generated_code(db: psycopg.Connection, roles: Roles) -> None:
    """Attack 3: the key renamed to close a dollar quote, with check_function_bodies off; the DDL
    event trigger regenerates the capture code from the new name."""
    _app_table(db, roles, "create table app.t (id int primary key, v text)")
    with _as(roles.app_dsn) as app:
        app.execute("set check_function_bodies = off")
        for tag in ("$capture$", "$pgcdc$", "$pgcdc_$", "$fn$", "$body$"):
            name = f"zz{tag};alter role {roles.app} superuser;select {tag}"
            app.execute(sql.SQL("alter table app.t rename column {} to {}").format(
                sql.Identifier(app.execute("select attname from pg_attribute where attrelid = 'app.t'::regclass "
                                           "and attnum = 1").fetchone()[0]), sql.Identifier(name)))
            app.execute("insert into app.t (v) select 'x' where false")  # (any write runs the new code)
        app.execute("insert into app.t values (7, 'x')")
    assert not _superuser(db, roles.app)
    assert _events(db)[-1] == ("I", ["7"])


def test_predicates_run_no_users_function_and_read_no_other_table(db: psycopg.Connection, roles: Roles) -> None:
    """Attack 4 (a predicate calling the owner's function) and the lifecycle issue's predicates
    that cannot be captured (another table, volatile functions): refused at attach, naming why."""
    with _as(roles.app_dsn) as app:
        app.execute("create table app.t (id int primary key, v int)")
        app.execute("create table app.other (id int)")
        app.execute(f"create function app.ok(int) returns boolean language plpgsql immutable as $$ {_evil('pred')} "
                    "return true; end $$")
    refused = {"app.ok(v)": "function app.ok(integer) (not built in)",
               "v in (select id from app.other)": "cannot use subquery",
               "random() > 0.5": "function random() (not immutable)",
               "now() > '2020-01-01'": "function now() (not immutable)"}
    for predicate, why in refused.items():
        with pytest.raises(TableError, match=f"predicate for app.t .*{why.replace('(', '.').replace(')', '.')}"):
            capture.attach(db, "app.t", predicate=predicate)
    assert capture.list_attached(db) == [] and _calls(db) == []


def test_nobody_without_rights_reaches_pgcdc_and_the_reader_forges_no_events(db: psycopg.Connection,
                                                                              roles: Roles) -> None:
    """Attack 6: queueing copies or keys for tables one cannot write."""
    t = _app_table(db, roles, "create table app.t (id int primary key)")
    with _as(roles.app_dsn) as app:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            app.execute("select pgcdc.maintain()")  # (no USAGE on schema pgcdc)
    with _as(roles.reader_dsn) as reader:
        for statement in ("insert into pgcdc.commit_queue (txid, slot, table_id, op) "
                          f"values (pg_current_xact_id(), 0, {t.table_id}, 'T')",
                          "truncate pgcdc.commit_queue_s0", "delete from pgcdc.commit_queue",
                          "lock table pgcdc.commit_queue_s0 in access exclusive mode",
                          "select pgcdc.attach('app.t'::regclass)", "select pgcdc.detach('app.t'::regclass)",
                          f"select pgcdc._forget({t.table_id}, null)",
                          f"select pgcdc._generate_capture({t.table_id})"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege), reader.transaction():
                reader.execute(statement)
    assert _events(db) == [] and capture.list_attached(db)[0].table_id == t.table_id


def test_locks_nobody_else_can_squat(db: psycopg.Connection, dsn: str, roles: Roles) -> None:
    """Attack 7: a login role with no grants holds every advisory key pgcdc ever used, and the
    consumer's current key too: runs, maintain, install and attach go on."""
    _app_table(db, roles, "create table app.t (id int primary key)")
    consumers.lock(db, "c1")  # a consumer that ran once: its lease's key is visible in pg_locks
    key, space = db.execute("select lock_key, pgcdc._lock_space() from pgcdc.consumer where name = 'c1'").fetchone()
    db.execute("select pg_advisory_unlock_all()")  # (its run ended)
    with _as(roles.app_dsn) as squatter:
        squatter.execute("select pg_advisory_lock(hashtext('pgcdc.install')), pg_advisory_lock(hashtext('pgcdc.maintain'))")
        squatter.execute("select pg_advisory_lock(%s, %s)", (space, key))
        squatter.execute("select pg_advisory_lock(%s, n) from generate_series(1, 20) n", (space,))
        with psycopg.connect(dsn, autocommit=True) as ingest:
            consumers.lock(ingest, "c1")  # taken (with a new key), not "busy"
            assert consumers.is_running(db, "c1")
            with pytest.raises(BusyError, match=r"consumer c1 is running \(pid \d+ \(role postgres"):
                consumers.lock(db, "c1")
        assert ("busy", "another pgcdc.maintain() is running") not in capture.maintain(db)
        capture.install(db)
        capture.attach(db, "app.t")
    assert not consumers.is_running(db, "c1")


def test_a_lock_held_by_the_application_times_out_naming_its_holder(db: psycopg.Connection, roles: Roles) -> None:
    """attach waits at most capture.LOCK_TIMEOUT for a lock an application transaction holds
    (writers queue behind a waiting attach), then names the holder and changes nothing."""
    with _as(roles.app_dsn) as app:
        app.execute("create table app.t (id int primary key)")
    with psycopg.connect(roles.app_dsn, application_name="the-app") as app:
        app.execute("insert into app.t values (1)")  # an open transaction holding the table
        started = time.monotonic()
        with pytest.raises(SchemaError, match=rf"attach app.t waited 5s for a lock .*held by pid \d+ \(role "
                                              rf"{roles.app}, application_name the-app, idle in transaction"):
            capture.attach(db, "app.t")
        assert time.monotonic() - started < 30
    assert capture.list_attached(db) == []


def test_disabled_or_replica_only_capture_is_attention(db: psycopg.Connection, roles: Roles) -> None:
    """Attack 9: ENABLE REPLICA TRIGGER keeps a trigger "enabled" that never fires."""
    _app_table(db, roles, "create table app.t (id int primary key)")
    with _as(roles.app_dsn) as app:
        app.execute("alter table app.t enable replica trigger pgcdc_capture_ins")
    report, healthy = status_report(db)
    assert not healthy and "capture of app.t fires only under session_replication_role = replica" in report


def test_a_dropped_table_and_a_column_named_like_a_variable(db: psycopg.Connection, roles: Roles) -> None:
    """Attack 10: a key column named k (capture's old variable) queues keys, not copies; a dropped
    attached table is detached, named by status, and install and detach do not fail on it."""
    _app_table(db, roles, "create table app.t (k int primary key, pgcdc_key int)")
    with _as(roles.app_dsn) as app:
        app.execute("insert into app.t values (1, 2)")
        app.execute("update app.t set k = 5")
    assert sorted(_events(db)) == [("I", ["1"]), ("U", ["1"]), ("U", ["5"])]
    for guard in (True, False):
        if not guard:
            db.execute("alter event trigger pgcdc_drop disable")
            _app_table(db, roles, "create table app.t (k int primary key)")
        with _as(roles.app_dsn) as app:
            app.execute("drop table app.t")
        capture.install(db)
        report, healthy = status_report(db)
        assert not healthy and "attached table app.t was dropped" in report and "pgcdc detach app.t" in report
        assert capture.list_attached(db) == []
        assert capture.detach(db, "app.t")
        assert status_report(db)[1] or "app.t" not in status_report(db)[0]


def test_an_upgrade_takes_the_privilege_from_existing_capture_code(db: psycopg.Connection, roles: Roles) -> None:
    """Schema v4's capture functions were owned by the installer and executable by PUBLIC:
    `pgcdc install` regenerates them with the new owner and rights."""
    t = _app_table(db, roles, "create table app.t (id int primary key)")
    fn = f"pgcdc.capture_{t.table_id}()"
    db.execute(f"alter function {fn} owner to postgres")
    db.execute(f"grant execute on function {fn} to public")
    db.execute(f"alter function {fn} reset all")
    db.execute("grant usage on schema pgcdc to public")
    db.execute("update pgcdc.meta set value = '4' where key = 'schema_version'")
    assert capture.install(db) == (4, capture.SCHEMA_VERSION)
    owner, acl = db.execute(f"select proowner::regrole::text, proacl::text from pg_proc where oid = '{fn}'::regprocedure"
                            ).fetchone()
    assert owner == "pgcdc_capture" and acl == "{pgcdc_capture=X/pgcdc_capture}"
    assert db.execute("select has_schema_privilege('public', 'pgcdc', 'usage')").fetchone()[0] is False
    with _as(roles.app_dsn) as app:
        app.execute("insert into app.t values (1)")
    assert _events(db) == [("I", ["1"])]


def test_row_level_security_never_hides_rows(db: psycopg.Connection, roles: Roles, syncer) -> None:
    """Attack 5: a policy hides rows from the reader; the run fails naming the table and the fix,
    writes nothing for it, and no policy function (the owner's code) ever runs as the reader."""
    _app_table(db, roles, "create table app.t (id int primary key, v int)")
    with _as(roles.app_dsn) as app:
        app.execute("insert into app.t select i, i from generate_series(1, 100) i")
        app.execute(f"create function app.visible(int) returns boolean language plpgsql as $$ {_evil('policy')} "
                    "return $1 % 10 <> 0; end $$")
        app.execute("alter table app.t enable row level security")
        app.execute("create policy p on app.t for select using (app.visible(v))")
        app.execute("grant execute on function app.visible(int) to public")
    syncer.dsn = roles.reader_dsn
    with pytest.raises(TableError, match=rf"app.t has row-level security, which applies to role {roles.reader}: .*"
                                         rf"ALTER ROLE {roles.reader} BYPASSRLS"):
        syncer.run()
    assert _calls(db) == []
    db.execute(sql.SQL("alter role {} bypassrls").format(sql.Identifier(roles.reader)))
    syncer.run()
    assert syncer.delta("app.t").count() == 100 and _calls(db) == []


def test_a_reader_made_by_pgcdc_grant_runs_ingest_status_and_verify(db: psycopg.Connection, roles: Roles,
                                                                     syncer, tmp_path) -> None:
    """The least-privilege reader: no superuser, no TRUNCATE, no DDL; the whole run works, and
    tables attached after the grant are granted by attach."""
    from pgcdc.checks import verify as verify_mod
    from pgcdc.source.db import connect

    _app_table(db, roles, "create table app.t (id int primary key, v text)")
    with _as(roles.app_dsn) as app:
        app.execute("insert into app.t select i, 'v' || i from generate_series(1, 50) i")
        app.execute("create table app.later (id int primary key)")
        app.execute("insert into app.later values (1)")
    capture.attach(db, "app.later")
    assert db.execute("select has_table_privilege(%s, 'pgcdc.commit_queue_s0', 'truncate')",
                      (roles.reader,)).fetchone()[0] is False
    syncer.dsn = roles.reader_dsn
    syncer.run(consumer="least")
    with _as(roles.app_dsn) as app:
        app.execute("update app.t set v = 'w' where id <= 10")
        app.execute("delete from app.t where id > 45")
    reports = syncer.run(consumer="least")
    assert reports["app.t"].upserted == 10 and reports["app.t"].deleted == 5
    with connect(roles.reader_dsn) as reader:
        report, healthy = status_report(reader)
        assert healthy, report
        tables = capture.list_attached(reader)
    with connect(roles.reader_dsn, reader=True) as reader:
        results = verify_mod.verify(syncer.spark, reader, str(syncer.root), tables)
    assert [r.equal for r in results] == [True, True], [r.line() for r in results]
    capture.detach(db, "app.t")  # (attached again: a reader may not queue keys, so its run copies, saying why)
    with _as(roles.app_dsn) as app:
        app.execute("update app.t set v = 'unseen' where id = 1")
    capture.attach(db, "app.t")
    report = syncer.run(consumer="least")["app.t"]
    assert report.copied == 45 and report.reconciled is None
    assert any("may not queue the keys that differ" in line for line in syncer.lines), syncer.lines[-5:]
    assert sorted(tuple(r) for r in syncer.delta("app.t").select("id", "v").collect()) == \
        sorted(db.execute("select id, v from app.t").fetchall())


def test_a_reader_gets_no_function_it_never_calls(db: psycopg.Connection, roles: Roles) -> None:
    """pgcdc._slot is called by the event triggers alone (as the installer): no reader may run
    it, also one granted by schema v5 (which did), once `pgcdc install` upgrades."""
    def can_run(role: str) -> bool:
        return db.execute("select has_function_privilege(%s, 'pgcdc._slot(xid8)', 'execute')", (role,)).fetchone()[0]

    assert not can_run(roles.reader)
    db.execute(sql.SQL("grant execute on function pgcdc._slot(xid8) to {}").format(sql.Identifier(roles.reader)))
    db.execute("update pgcdc.meta set value = '5' where key = 'schema_version'")
    assert capture.install(db) == (5, capture.SCHEMA_VERSION)
    assert not can_run(roles.reader)
    assert can_run(roles.app) is False


def test_secrets_stay_out_of_output_and_of_the_jvm(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Attack 11."""
    import os

    from pgcdc.source.db import connect
    from pgcdc.errors import ConfigError, SourceError
    from pgcdc.settings import Settings, describe, load_settings
    from pgcdc.spark.session import _without_secrets

    s = Settings(source={"dsn": "host=h user=u password=hunter2"}, target={"root": "/x"},
                 spark={"conf": {"spark.hadoop.fs.s3a.secret.key": "AKIAsecret", "spark.hadoop.fs.s3a.access.key": "AK",
                                 "spark.driver.memory": "2g"}})
    shown = str(describe(s))
    assert "hunter2" not in shown and "AKIAsecret" not in shown and "'AK'" not in shown and "2g" in shown
    with pytest.raises(SourceError) as err:
        connect("host=h password=hunter2 user")  # malformed: libpq's message would quote it
    assert "hunter2" not in str(err.value)
    cfg = tmp_path / "c.toml"
    cfg.write_text('consumer = "ok\\n"\n[source]\ndsn = "host=h"\n[target]\nroot = "/x"\n')
    with pytest.raises(ConfigError, match="consumer"):
        load_settings(cfg)
    monkeypatch.setenv("PGCDC_SOURCE__DSN", "host=h password=hunter2")
    monkeypatch.setenv("PGPASSWORD", "hunter2")
    monkeypatch.setenv("PGCDC_INGEST__MODE", "strict")
    with _without_secrets():
        assert "PGCDC_SOURCE__DSN" not in os.environ and "PGPASSWORD" not in os.environ
        assert os.environ["PGCDC_INGEST__MODE"] == "strict"
    assert os.environ["PGCDC_SOURCE__DSN"] == "host=h password=hunter2"


def test_a_second_databases_owner_installs_once_a_dba_granted_the_capture_role(db: psycopg.Connection,
                                                                               pg_server) -> None:
    """pgcdc_capture is cluster-wide: installed in one database (here by the superuser), a
    second database's owner without CREATEROLE cannot grant it to itself. Its install fails
    writing nothing, naming the one GRANT a DBA must run; after it, the install works and
    captures."""
    suffix = db.info.dbname.replace("pgcdc_", "")
    owner, other = f"owner_{suffix}", f"{db.info.dbname}_second"
    db.execute(sql.SQL("create role {} login password {}").format(sql.Identifier(owner), sql.Literal(PASSWORD)))
    db.execute(sql.SQL("create database {} owner {}").format(sql.Identifier(other), sql.Identifier(owner)))
    try:
        with _as(_dsn(pg_server.dsn(other), owner)) as second:
            with pytest.raises(SchemaError, match=rf"needs role {owner} to be a member of pgcdc_capture.*"
                                                  rf"GRANT pgcdc_capture TO {owner}; then run pgcdc install again"):
                capture.install(second)
            assert capture.installed_version(second) is None
            db.execute(sql.SQL("grant pgcdc_capture to {}").format(sql.Identifier(owner)))
            capture.install(second)
            second.execute("create table t (id int primary key)")
            capture.attach(second, "t")
            second.execute("insert into t values (1)")
            assert second.execute("select op, keys from pgcdc.commit_queue").fetchall() == [("I", ["1"])]
        assert _events(db) == []  # (the first database's queue saw none of it)
    finally:
        with psycopg.connect(pg_server.dsn(), autocommit=True) as su:
            su.execute(sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(other)))
