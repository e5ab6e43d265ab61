"""A table's whole life: predicates, domain keys, session settings, column changes, drops,
detach and attach again (docs/capture.md).

The oracle reads PostgreSQL with psycopg (in a session of its own settings) and Delta with a
plain Spark read, never through pgcdc's reading code.
"""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from pgcdc.source import capture
from pgcdc.errors import TableError, TargetError
from pgcdc.checks.status import status_report


def _delta_rows(syncer, table: str, columns: str) -> list[tuple]:
    return sorted(tuple(r) for r in syncer.delta(table).selectExpr(*columns.split(", ")).collect())


@pytest.mark.parametrize("path", ["driver", "spark"])
def test_a_predicate_on_the_key_column_works_in_every_batch(db: psycopg.Connection, syncer, path: str) -> None:
    """The batch query joins the keys with the table: a predicate naming the key column was
    ambiguous there and stopped the table for good."""
    db.execute("create table t (id int primary key, v text)")
    db.execute("insert into t select i, 'a' from generate_series(1, 40) i")
    capture.attach(db, "t", predicate="id % 2 = 0")
    ingest = {"driver_keys": 0} if path == "spark" else {}
    syncer.run(**ingest)
    db.execute("update t set v = 'b' where id <= 10")
    db.execute("insert into t select i, 'c' from generate_series(41, 50) i")
    db.execute("delete from t where id in (2, 3)")
    db.execute("update t set id = id + 100 where id = 4")  # a key change: the old key goes
    report = syncer.run(**ingest)["public.t"]
    assert report.batches >= 1
    pg = sorted(db.execute("select id, v from t where id % 2 = 0").fetchall())
    assert _delta_rows(syncer, "public.t", "id, v") == pg and len(pg) == 24


def test_a_domain_over_date_key_is_exact_under_any_datestyle(db: psycopg.Connection, syncer, dsn: str) -> None:
    """Capture pinned DateStyle only for type names starting with date/time: a domain over date
    written as 03/04/2024 under 'SQL, DMY' was read back as 4 March."""
    db.execute("create domain day as date")
    db.execute("create table t (d day primary key, v int)")
    capture.attach(db, "t")
    with psycopg.connect(dsn, autocommit=True) as writer:
        writer.execute("set datestyle = 'SQL, DMY'")
        writer.execute("insert into t values ('03/04/2024', 1), ('15/03/2024', 1)")
        syncer.run()
        writer.execute("update t set v = 2 where d = '03/04/2024'")
        writer.execute("insert into t values ('01/02/2024', 3)")
    syncer.run()
    with psycopg.connect(dsn, autocommit=True) as oracle:
        oracle.execute("set datestyle = 'ISO'")
        pg = sorted(oracle.execute("select d::text, v from t").fetchall())
    assert pg == [("2024-02-01", 3), ("2024-03-15", 1), ("2024-04-03", 2)]
    assert _delta_rows(syncer, "public.t", "cast(d as string), v") == pg


def test_text_forms_do_not_depend_on_the_database_time_zone(db: psycopg.Connection, syncer, dsn: str) -> None:
    """Values kept as PostgreSQL text (a tstzrange, a domain over timestamptz) came out in the
    session's TimeZone: UTC on the copy and Spark paths, the database's on the driver path."""
    db.execute(f'alter database "{db.info.dbname}" set timezone = \'America/New_York\'')
    db.execute("create domain moment as timestamptz")
    db.execute("create table t (id int primary key, r tstzrange, m moment)")
    capture.attach(db, "t")
    with psycopg.connect(dsn, autocommit=True) as writer:  # (a new session: New York time)
        writer.execute("insert into t select i, tstzrange('2024-01-01 10:00', '2024-01-01 12:00'), "
                       "'2024-06-01 08:00' from generate_series(1, 20) i")
        syncer.run()  # the copy
        writer.execute("update t set m = '2024-07-01 09:30' where id <= 3")  # a small batch: the driver writes it
        syncer.run()
        writer.execute("update t set r = tstzrange('2024-02-01 00:00', null) where id > 15")
        syncer.run(driver_keys=0)  # Spark reads and writes it
    with psycopg.connect(dsn, autocommit=True) as oracle:
        oracle.execute("set timezone = 'UTC'")
        pg = sorted(oracle.execute("select id, r::text, m::text from t").fetchall())
    assert pg[0][2] == "2024-07-01 13:30:00+00"
    assert _delta_rows(syncer, "public.t", "id, r, m") == pg


def test_dropping_an_attached_table_releases_the_queue(db: psycopg.Connection, syncer) -> None:
    """A dropped table's consumer state pinned the retention horizon: queue slots were never
    emptied again. Now the drop detaches it and maintain empties the slots."""
    db.execute("create table t (id int primary key)")
    db.execute("create table keep (id int primary key)")
    capture.attach(db, "t")
    capture.attach(db, "keep")
    syncer.run()
    db.execute("insert into t values (1)")  # pending for the consumer when t goes
    db.execute("insert into keep values (1)")
    db.execute("drop table t")
    syncer.run()
    assert db.execute("select count(*) from pgcdc.consumer_state").fetchone()[0] == 1
    # the run's maintain emptied the slot: t's pending event no longer pins it
    assert db.execute("select count(*) from pgcdc.commit_queue").fetchone()[0] == 0
    with pytest.raises(TableError, match="table public.never not found"):
        capture.detach(db, "public.never")


def test_verify_reports_and_never_crashes(db: psycopg.Connection, syncer) -> None:
    """verify crashed on a duplicated Delta row, on bigint keys at both ends of the range, and
    after a key rename where no event trigger saw it; each is now a difference, naming the key."""
    from pgcdc.checks.verify import verify

    db.execute("create table t (id bigint primary key, v text)")
    db.execute("insert into t values (-9223372036854775808, 'low'), (0, 'mid'), (9223372036854775807, 'high')")
    capture.attach(db, "t")
    syncer.run()
    tables = capture.list_attached(db)
    [result] = verify(syncer.spark, db, str(syncer.root), tables)
    assert result.equal, result.line()
    syncer.delta("public.t").where("id = 0").write.format("delta").mode("append").save(syncer.path("public.t"))
    [result] = verify(syncer.spark, db, str(syncer.root), tables)
    assert not result.equal and "0 (more than once in Delta)" in result.line()
    assert (result.only_in_postgres, result.only_in_delta, result.duplicates) == (0, 0, 1), result.line()
    db.execute("alter event trigger pgcdc_ddl disable")
    db.execute("alter table t rename column id to key_id")
    [result] = verify(syncer.spark, db, str(syncer.root), tables)
    assert not result.equal and "key column id is no longer a column of public.t; run `pgcdc attach public.t`" in \
        result.line()
    assert "resync" not in result.line()  # (the rows are equal: attaching again is all it needs)


def test_each_verify_outcome_names_its_own_next_step(db: psycopg.Connection, syncer) -> None:
    """What a difference means depends on why, and verify says what to do about each: changes
    not synced yet, another writer's change, a table attached again, a table no reader can read
    (never a stack trace)."""
    from pgcdc.checks.verify import verify

    db.execute("create table t (id int primary key, v text)")
    db.execute("insert into t select i, 'a' from generate_series(1, 10) i")
    capture.attach(db, "t")
    syncer.run()

    def outcome(equal: bool = False) -> str:
        [result] = verify(syncer.spark, db, str(syncer.root), capture.list_attached(db), consumer="test")
        assert result.equal == equal, result.line()
        return result.line()
    db.execute("update t set v = 'b' where id = 1")
    line = outcome(equal=True)  # (a change not synced yet is no difference: on its way)
    assert "Delta equals PostgreSQL (10 rows; 1 rows differ by changes not synced yet)" in line, line
    db.execute("set session_replication_role = replica")  # (capture bypassed: no event)
    db.execute("update t set v = 'bypassed' where id = 3")
    db.execute("reset session_replication_role")
    line = outcome()
    assert "1 rows only in PostgreSQL, 1 only in Delta" in line and "3 (v: PostgreSQL bypassed vs Delta a)" in line \
        and "changed where capture did not see them" in line and "1 rows differ by changes not synced yet" in line, line
    db.execute("update t set v = 'a' where id = 3")
    syncer.run()
    path = syncer.path("public.t")
    syncer.spark.sql(f"delete from delta.`{path}` where id = 2")  # another tool's write
    line = outcome()
    assert "1 rows only in PostgreSQL" in line and f"another writer changed {path} after pgcdc's last commit (DELETE" \
        in line and "`pgcdc resync public.t` writes it again" in line, line
    capture.detach(db, "t")
    capture.attach(db, "t")
    line = outcome()
    assert "public.t was detached and attached again since" in line and "run `pgcdc ingest`, which reconciles it by " \
        "range" in line, line
    for data in Path(path).glob("*.parquet"):
        data.unlink()
    line = outcome()
    assert line.startswith("public.t: NOT COMPARED: ") and "references data files that are gone" in line \
        and "run `pgcdc resync public.t`" in line, line


def test_a_renamed_table_keeps_its_delta_table_and_a_rename_back_revives_nothing(db: psycopg.Connection,
                                                                                  syncer) -> None:
    """Renamed, a table was copied into a new folder, leaving the old one stale; renamed back
    after maintenance turned the queue over, the old folder's older state was used again and
    the changes made under the other name were lost. A table is known by its table_id."""
    from pgcdc.sync.plan import table_path

    db.execute("create table r (id int primary key, v int)")
    db.execute("insert into r select i, 0 from generate_series(1, 40) i")
    capture.attach(db, "r")
    syncer.run()
    first = syncer.path("public.r")
    db.execute("alter table r rename to r2")
    db.execute("update r2 set v = 1")
    syncer.run()
    db.execute("select * from pgcdc.maintain()")
    db.execute("alter table r2 rename to r")
    db.execute("update r set v = v + 1 where id <= 10")
    syncer.run()
    [t] = capture.list_attached(db)
    assert table_path(db, "test", t, str(syncer.root)) == (first, True)
    assert not (syncer.root / "public.r2").exists()
    pg = sorted(db.execute("select id, v from r").fetchall())
    assert _delta_rows(syncer, "public.r", "id, v") == pg and pg[0] == (1, 2) and pg[-1] == (40, 1)
    # a new table under the old name, while the renamed one still syncs into that folder
    db.execute("alter table r rename to r3")
    db.execute("create table r (id int primary key)")
    capture.attach(db, "r")
    with pytest.raises(TargetError, match=r"is the Delta table of public.r3, which consumer test synced there"):
        syncer.run()
    assert _delta_rows(syncer, "public.r", "id, v") == pg  # untouched


def test_attaching_again_with_another_key_never_reinterprets_pending_events(db: psycopg.Connection,
                                                                          syncer) -> None:
    """`attach --key code` while events queued under `id` were pending read those ids as codes,
    deleted 100 rows downstream and lost 100 updates. Now the table is attached anew: its Delta
    table, keyed by id, cannot be reconciled by code, so the run copies it, saying why, and
    the pending events of the old attachment are never read."""
    db.execute("create table t (id int primary key, code text not null unique, v int)")
    db.execute("insert into t select i, 'c' || (1000 - i), 0 from generate_series(1, 100) i")
    capture.attach(db, "t")
    syncer.run()
    db.execute("update t set v = 1")  # pending, queued by id
    capture.attach(db, "t", key=["code"])
    report = syncer.run()["public.t"]
    assert report.copied == 100 and report.reconciled is None
    assert any("keyed by id, the table now by code" in line for line in syncer.lines), syncer.lines[-3:]
    db.execute("update t set v = 2 where id <= 10")
    syncer.run()
    pg = sorted(db.execute("select id, code, v from t").fetchall())
    assert _delta_rows(syncer, "public.t", "id, code, v") == pg and pg[0][2] == 2 and pg[-1][2] == 1


def test_a_copy_survives_an_idle_in_transaction_timeout(db: psycopg.Connection, syncer) -> None:
    """With idle_in_transaction_session_timeout = 1s for the database, the exporting transaction
    was ended while Spark copied (`invalid snapshot identifier`), on every run."""
    db.execute(f"alter database \"{db.info.dbname}\" set idle_in_transaction_session_timeout = '1s'")
    db.execute("create table t (id int primary key, v text)")
    db.execute("insert into t select i, repeat('x', 100) from generate_series(1, 50000) i")
    capture.attach(db, "t")
    syncer.run(jdbc_partitions=4)
    assert syncer.delta("public.t").count() == 50000


def test_a_table_left_out_of_a_consumers_tables_is_named_not_called_a_bug(db: psycopg.Connection, syncer) -> None:
    db.execute("create table a (id int primary key)")
    db.execute("create table b (id int primary key)")
    capture.attach(db, "a")
    capture.attach(db, "b")
    syncer.run()
    db.execute("insert into b values (1)")
    syncer.run(tables=["public.a"])
    report, healthy = status_report(db)
    assert not healthy and "consumer test no longer syncs public.b (its last run left it out)" in report
    assert "report it as a bug" not in report


def test_the_retention_limit_counts_only_unapplied_events(db: psycopg.Connection, syncer, dsn: str) -> None:
    """An unrelated transaction held open past the retention limit: a caught-up out-of-order
    consumer (its watermark held back, every event above it applied) was marked, and every run
    copied its tables again."""
    import time

    from pgcdc.source import consumers

    db.execute("create table t (id int primary key)")
    db.execute("create table other (id int)")
    capture.attach(db, "t")
    syncer.run()
    with psycopg.connect(dsn) as long_tx:
        long_tx.execute("insert into other values (1)")  # holds the txmin back
        db.execute("insert into t select generate_series(1, 10)")
        syncer.run()  # applied out of order
        consumers.set_retention(db, max_age="1 second")
        time.sleep(1.5)
        assert [a for a, _ in capture.maintain(db) if a == "resync needed"] == []
        long_tx.rollback()
    consumers.set_retention(db, max_age="7 days")
    assert syncer.delta("public.t").count() == 10


def test_a_delta_table_missing_a_data_file_stops_its_sync_until_resync(db: psycopg.Connection, syncer) -> None:
    """A VACUUM ... RETAIN 0 HOURS by another tool during a batch deletes the batch's new files before
    it commits them: the table becomes unreadable. The next ingest exited 0 and status said OK."""
    import os

    from pgcdc.sync.ingest import Job

    from pgcdc.sync.runs import resync_tables

    db.execute("create table t (id int primary key, v int)")
    db.execute("insert into t select i, 0 from generate_series(1, 100) i")
    capture.attach(db, "t")
    syncer.run()
    live = [f for f in syncer.delta("public.t").inputFiles()]
    os.remove(live[0].removeprefix("file:"))  # what that VACUUM leaves
    db.execute("update t set v = 1 where id = 1")
    with pytest.raises(TargetError, match=r"references data files that are gone .*`pgcdc resync public.t`"):
        syncer.run()
    report, healthy = status_report(db)
    assert not healthy and "failed" in report
    resync_tables(Job(syncer.settings(), syncer.spark, syncer.lines.append), ["public.t"])
    syncer.run()
    assert sorted(tuple(r) for r in syncer.delta("public.t").collect()) == sorted(db.execute("select id, v from t").fetchall())


def _pg_and_delta(db: psycopg.Connection, syncer, columns: str) -> tuple[list[tuple], list[tuple]]:
    """The rows of public.t (these columns, id first, by id) as psycopg reads them and as plain
    Spark reads Delta."""
    return db.execute(f"select {columns} from t order by id").fetchall(), _delta_rows(syncer, "public.t", columns)


@pytest.mark.parametrize("one_job", [False, True], ids=["a job a run", "one job for every run"])
def test_without_the_ddl_guard_column_changes_land_exactly(db: psycopg.Connection, syncer, one_job: bool) -> None:
    """An install by a role that may not create event triggers: the run itself sees the columns
    changed, so every row takes an added column's default (PostgreSQL fills it in without
    writing the rows: in place; or rewrites them without firing triggers: a copy, as the
    catalog no longer tells the old rows' value), and dropped, renamed and retyped columns
    leave no stale values (a retype without the rewrite guard is copied: its USING may have
    changed values); also with no write since. Also where one Job makes every run (a
    follower's), which keeps each table's schema between runs."""
    from pgcdc.sync.ingest import Job
    from pgcdc.sync.runs import run_job

    job = Job(syncer.settings(), syncer.spark, syncer.lines.append) if one_job else None

    def run() -> dict:
        return {r.table: r for r in run_job(job)} if job is not None else syncer.run()

    db.execute("alter event trigger pgcdc_ddl disable")
    db.execute("alter event trigger pgcdc_rewrite disable")
    db.execute("create table t (id int primary key, a text, n int)")
    db.execute("insert into t select i, 'x' || i, i from generate_series(1, 1000) i")
    capture.attach(db, "t")
    run()
    db.execute("alter table t add column b int default 42")  # no row is written: no event
    db.execute("alter table t add column r float8 default random()")  # rewritten, without triggers
    db.execute("insert into t (id, a) values (1001, 'new')")
    assert run()["public.t"].copied == 1001
    assert any(line.startswith("public.t: its columns changed (") and "copying the table again" in line
               for line in syncer.lines), syncer.lines
    pg, delta = _pg_and_delta(db, syncer, "id, a, n, b, r")
    assert delta == pg and {row[3] for row in delta} == {42}

    db.execute("alter table t add column c text default 'idle'")  # and no write at all after it
    run()
    pg, delta = _pg_and_delta(db, syncer, "id, a, b, c")
    assert delta == pg and {row[3] for row in delta} == {"idle"}

    db.execute("alter table t drop column a")
    db.execute("alter table t rename column b to bb")
    db.execute("alter table t alter column n type bigint using n * 10000000000")
    db.execute("update t set bb = 1 where id = 5")
    run()
    pg, delta = _pg_and_delta(db, syncer, "id, n, bb, r, c")
    assert delta == pg and syncer.delta("public.t").columns == ["id", "n", "bb", "r", "c"]
    db.execute("update t set bb = 2 where id = 6")  # batches go on as before
    assert run()["public.t"].copied is None
    pg, delta = _pg_and_delta(db, syncer, "id, n, bb, r, c")
    assert delta == pg


def test_with_on_schema_change_fail_a_column_change_stops_the_table_naming_resync(
        db: psycopg.Connection, syncer) -> None:
    from pgcdc.sync.ingest import Job
    from pgcdc.sync.runs import resync_tables

    db.execute("alter event trigger pgcdc_ddl disable")
    db.execute("create table t (id int primary key, a text)")
    db.execute("insert into t values (1, 'x')")
    capture.attach(db, "t")
    syncer.run()
    db.execute("alter table t add column b int default 42")
    commits = syncer.commits("public.t")
    with pytest.raises(TargetError, match=r"the columns of public.t changed \(added b \(existing rows: 42\)\) since "
                                          r".*run `pgcdc resync public.t`"):
        syncer.run(on_schema_change="fail")
    assert syncer.commits("public.t") == commits
    resync_tables(Job(syncer.settings(on_schema_change="fail"), syncer.spark, syncer.lines.append), ["t"])
    pg, delta = _pg_and_delta(db, syncer, "id, a, b")
    assert delta == pg == [(1, "x", 42)]


def test_detach_attach_reconciles_what_changed_in_between(db: psycopg.Connection, syncer) -> None:
    """A change made while the table was detached is found by the run after it is attached again
    (reconciled by range: sync/reconcile.py, tests/test_reconcile.py) and synced like any other."""
    db.execute("create table t (id int primary key, v text)")
    db.execute("insert into t values (1, 'a'), (2, 'b')")
    capture.attach(db, "t")
    syncer.run()
    capture.detach(db, "t")
    db.execute("update t set v = 'lost' where id = 1")  # not captured while detached
    capture.attach(db, "t")
    assert syncer.run()["public.t"].reconciled == 1
    assert _delta_rows(syncer, "public.t", "id, v") == [(1, "lost"), (2, "b")]
    db.execute("alter table t add column extra int default 7")
    db.execute("update t set v = 'after' where id = 2")
    assert syncer.run()["public.t"].events == 1
    assert _delta_rows(syncer, "public.t", "id, v, extra") == [(1, "lost", 7), (2, "after", 7)]


def _cli(cfg: Path, *args: str, env: dict[str, str] | None = None):
    import os
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "pgcdc", "--config", str(cfg), *args], capture_output=True, text=True,
                          env=os.environ | (env or {}), timeout=600)


@pytest.mark.slow
@pytest.mark.parametrize("engine,ddl", [("merge", "alter table t rename column v to w"),
                                        ("fast", "select pg_terminate_backend(pid) from pg_stat_activity "
                                                 "where datname = current_database() and pid <> pg_backend_pid()")])
def test_ddl_or_a_restart_racing_a_run_reads_as_one_line_and_the_next_run_picks_it_up(
        db: psycopg.Connection, syncer, tmp_path: Path, engine: str, ddl: str) -> None:
    """A column renamed after the run checked the columns, while Spark reads the batch: the same
    run renames it in Delta, in place, and applies the batch. Every connection of the run cut (a restart): the run fails
    with one line naming the table and saying the next run picks it up, no Spark stack trace;
    the next run does."""
    import sys

    db.execute("create table t (id int primary key, v text)")
    db.execute("insert into t select i, 'a' from generate_series(1, 100) i")
    capture.attach(db, "t")
    cfg = tmp_path / "pgcdc.toml"
    cfg.write_text(f'consumer = "test"\n[source]\ndsn = "{syncer.dsn}"\n[target]\nroot = "{syncer.root}"\n[ingest]\n'
                   f'recopy_fraction = 0\nsmall_batch_keys = 1\ndriver_keys = 0\nengine = "{engine}"\n')
    syncer.run(engine=engine)
    db.execute("update t set v = 'b' where id <= 50")
    act = f"{sys.executable} -c \"import psycopg; psycopg.connect('{syncer.dsn}', autocommit=True).execute('{ddl}')\""
    raced = _cli(cfg, "ingest", env={"PGCDC_FAILPOINT": "before-merge", "PGCDC_FAILPOINT_RUN": act})
    said = raced.stderr
    assert "\tat " not in said and "Traceback" not in said, said[-4000:]
    if "rename" in ddl:
        assert raced.returncode == 0, said[-3000:]
        assert "public.t: its columns changed while this run read it (PostgreSQL: column" in said, said[-3000:]
        assert "public.t: its columns changed in place (renamed v -> w)" in said, said[-3000:]
    else:
        assert raced.returncode == 4, said[-3000:]
        assert "PostgreSQL changed under this run (DDL on the table, a restart): nothing was half-applied, and the " \
            "next run picks it up" in said.splitlines()[-1], said[-3000:]
    syncer.run(engine=engine)  # (the next run: in-process, as exact)
    syncer.assert_equal("public.t")
