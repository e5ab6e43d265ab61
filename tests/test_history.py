"""History (`[target] history = true`, docs/history.md): `<table>__history` beside the mirror,
a row version per commit that changed the row.

The oracle reads PostgreSQL with psycopg, and the history and the mirror (as of each of its
versions, Delta's time travel) with the plain Spark session.
"""

from __future__ import annotations

from collections import defaultdict

import psycopg
import pytest

from fixtures.history import history_faults
from pgcdc.source import capture

HISTORY = {"target": {"history": True}}


def _versions(syncer, table: str = "app.t") -> dict[int, list]:
    """id -> its history rows, oldest first, as the plain reader sees them."""
    rows = syncer.spark.read.format("delta").load(syncer.path(table) + "__history").collect()
    out: dict[int, list] = defaultdict(list)
    for r in sorted(rows, key=lambda r: (r.id, r._pgcdc_from_version)):
        out[r.id].append(r)
    return dict(out)


def _span(v) -> tuple:
    return v.v, v.s, v._pgcdc_from_version, v._pgcdc_to_version, v._pgcdc_is_current


def _pg(db: psycopg.Connection) -> dict[int, tuple]:
    return {r[0]: tuple(r[1:]) for r in db.execute("select id, v, s from app.t").fetchall()}


def check_history(syncer, table: str = "app.t", samples: int = 3) -> dict[int, list]:
    """The history's rules (fixtures/history.py, the differential test's oracle), here against
    the mirror as of its newest version and `samples` others (each a Spark read: CI time): a
    key's versions never overlap, each closes no earlier than it opens, current iff not closed;
    the versions valid at mirror version V are exactly the mirror's live rows at V."""
    fault = history_faults(syncer.spark, syncer.path(table), ["id"], samples=samples)
    assert fault is None, fault
    return _versions(syncer, table)


def _table(db: psycopg.Connection, rows: int = 20) -> None:
    """app.t with `rows` rows (id, v = id, s = 's' || id), attached."""
    db.execute("create schema app; create table app.t (id int primary key, v int, s text)")
    db.execute(f"insert into app.t select i, i, 's' || i from generate_series(1, {rows}) i")
    if rows > 100:
        db.execute("analyze app.t")
    capture.attach(db, "app.t")


def test_a_row_changed_in_two_batches_has_three_versions_and_a_deleted_one_none_current(db: psycopg.Connection,
                                                                                        syncer) -> None:
    _table(db)
    syncer.run(**HISTORY)
    db.execute("update app.t set v = 100 where id = 1")
    db.execute("update app.t set s = 'same' where id = 3; update app.t set s = 's3' where id = 3")  # back as it was
    syncer.run(**HISTORY)
    db.execute("update app.t set v = 200 where id = 1")
    db.execute("delete from app.t where id = 2")
    syncer.run(**HISTORY)
    assert any("history follows the mirror's" in line for line in syncer.lines)
    versions = check_history(syncer, samples=1_000)  # (every version of the mirror)
    assert [(v.v, v._pgcdc_is_current) for v in versions[1]] == [(1, False), (100, False), (200, True)]
    assert [v._pgcdc_is_current for v in versions[2]] == [False] and len(versions[3]) == 1
    current = {k: (v.v, v.s) for k, vs in versions.items() for v in vs if v._pgcdc_is_current}
    assert current == _pg(db)
    assert all(v._pgcdc_watermark is not None for vs in versions.values() for v in vs)
    db.execute("insert into app.t values (2, 2, 'back')")  # a key back after a gap
    syncer.run(**HISTORY)
    versions = check_history(syncer)
    assert [v._pgcdc_is_current for v in versions[2]] == [False, True]
    assert versions[2][0]._pgcdc_to_version < versions[2][1]._pgcdc_from_version


def test_a_kill_between_the_mirror_and_its_history_is_made_good_by_the_next_run(db: psycopg.Connection, syncer,
                                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import pgcdc.lake.history as history

    _table(db)
    syncer.run(**HISTORY)
    db.execute("update app.t set v = -v where id <= 5")

    class Killed(BaseException):
        pass

    def kill(*args, **kwargs):
        raise Killed()
    monkeypatch.setattr(history, "apply", kill)  # (the fold, lake/history_versions.py)
    with pytest.raises(Killed):
        syncer.run(**HISTORY)
    monkeypatch.undo()
    db.execute("delete from app.t where id = 1")
    assert history.behind(syncer.spark, syncer.path("app.t"))
    syncer.run(**HISTORY)  # its idle pass would skip it; the full path folds both commits
    assert not history.behind(syncer.spark, syncer.path("app.t"))
    versions = check_history(syncer)
    assert [v.v for v in versions[2]] == [2, -2]
    assert [v._pgcdc_is_current for v in versions[1]] == [False, False]
    syncer.run(**HISTORY)  # nothing more: no commit to the history
    assert len(_versions(syncer)) == 20
    syncer.spark.sql(f"optimize delta.`{syncer.path('app.t')}`")  # another writer: a commit without changes
    assert history.behind(syncer.spark, syncer.path("app.t"))
    syncer.run(**HISTORY)  # folded: nothing opened or closed, and the history holds that version
    assert not history.behind(syncer.spark, syncer.path("app.t"))
    assert [[_span(v) for v in vs] for vs in _versions(syncer).values()] == \
        [[_span(v) for v in vs] for vs in versions.values()]


def test_a_resync_closes_what_it_no_longer_finds_and_opens_what_changed_without_rewriting_history(
        db: psycopg.Connection, syncer) -> None:
    """Copies in chunks (a batch past recopy_fraction), soft deletes, and a column added (a copy
    that changes the schema, folded as a snapshot): the versions of rows the copies did not
    change stay as they were."""
    _table(db, 300)
    opts = {"target": {"history": True, "deletes": "soft"}, "copies": {"chunk_rows": 100, "chunk_seconds": 0}}
    syncer.run(**opts)
    before = check_history(syncer)
    db.execute("update app.t set v = -v where id <= 150")
    db.execute("delete from app.t where id between 290 and 300")
    lines = len(syncer.lines)
    syncer.run(recopy_fraction=0.1, **opts)
    assert any("copying the table instead" in line for line in syncer.lines[lines:])
    after = check_history(syncer)
    assert all(after[k] == before[k] for k in range(151, 290)), "rows the copy found unchanged keep their version"
    assert all([v.v for v in after[k]] == [k, -k] for k in range(1, 151))
    assert all(not any(v._pgcdc_is_current for v in after[k]) for k in range(290, 301))
    db.execute("alter table app.t add column extra int default 7")
    syncer.run(**opts)
    added = check_history(syncer)
    assert all(len(added[k]) == len(after[k]) + 1 and added[k][-1].extra == 7 for k in range(1, 290))
    assert all([_span(v) for v in added[k]] == [_span(v) for v in after[k]] for k in range(290, 301)), \
        "a gone row's closed versions stay"
    current = {k: (v.v, v.s) for k, vs in added.items() for v in vs if v._pgcdc_is_current}
    assert current == _pg(db)


def test_history_on_for_a_table_already_synced_starts_from_it_and_either_engine_feeds_it(
        db: psycopg.Connection, syncer) -> None:
    """The fast engine writes no change data files: the history folds the changes Delta's feed
    reader finds from its commits' files and deletion vectors (an update as a delete and an
    insert); a feed asked for by target.change_data_feed leaves the table to merge."""
    from pgcdc.errors import TargetError

    _table(db)
    syncer.run(engine="fast")
    db.execute("update app.t set v = 0 where id = 1")
    syncer.run(**HISTORY)  # applied as before, then the history starts from the mirror as it is
    versions = check_history(syncer)
    assert len(versions) == 20 and all(len(vs) == 1 and vs[0]._pgcdc_is_current for vs in versions.values())
    assert versions[1][0].v == 0
    db.execute("update app.t set v = 1 where id = 1")
    db.execute("delete from app.t where id = 2")
    lines = len(syncer.lines)
    syncer.run(**HISTORY)
    assert any("engine fast: local table" in line for line in syncer.lines[lines:])
    versions = check_history(syncer)
    assert [v.v for v in versions[1]] == [0, 1] and [v._pgcdc_is_current for v in versions[2]] == [False]
    db.execute("update app.t set v = 2 where id = 1")
    feed = {"target": {"history": True, "change_data_feed": True}}
    with pytest.raises(TargetError, match="change data feed"):
        syncer.run(engine="fast", **feed)
    lines = len(syncer.lines)
    syncer.run(**feed)
    assert any("engine merge: the table has the change data feed on" in line for line in syncer.lines[lines:])
    versions = check_history(syncer)
    assert [v.v for v in versions[1]] == [0, 1, 2]
    assert {k: v.v for k, vs in versions.items() for v in vs if v._pgcdc_is_current} == \
        {k: v for k, (v, _) in _pg(db).items()}


def test_verify_compares_the_historys_current_rows_too_and_compact_compacts_it(db: psycopg.Connection,
                                                                               syncer) -> None:
    from pgcdc.sync.compact import compact
    from pgcdc.checks.verify import verify

    _table(db)
    syncer.run(**HISTORY)
    t = next(a for a in capture.list_attached(db) if a.name == "app.t")
    found = verify(syncer.spark, db, str(syncer.root), [t], "test")
    assert [c.line() for c in found] == ["app.t: Delta equals PostgreSQL (20 rows)",
                                         "app.t (history): Delta equals PostgreSQL (20 rows)"]
    db.execute("update app.t set v = 0 where id = 3")
    found = verify(syncer.spark, db, str(syncer.root), [t], "test")
    # (the mirror: a change not synced yet, on its way; the history compares without the state)
    assert [c.equal for c in found] == [True, False] and found[0].in_flight == 1 and "verify again" in found[1].line()
    done = compact(syncer.settings(**HISTORY), syncer.spark, ["app.t"])
    assert [(c.table, c.path) for c in done] == [("app.t", syncer.path("app.t")),
                                                 ("app.t (history)", syncer.path("app.t") + "__history")]


def test_two_folds_starting_a_history_at_once_leave_it_exact_at_every_version(spark, tmp_path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A fan-in's sources (or a consumer's workers) may both find no history and start it, each
    from the mirror version it saw: one creates it, the other folds what follows. Here the
    creation by the fold that saw version 0 lands between the other's plan (version 2) and its
    own creation, the order that once opened every row of versions 1-2 at version 2."""
    import pgcdc.lake.history as history
    from delta.tables import DeltaTable

    path = str(tmp_path / "app.t")
    spark.range(10).selectExpr("id", "cast(id as string) as v").write.format("delta") \
        .option("delta.enableChangeDataFeed", "true").save(path)
    create = history._create
    first = history.commit(spark, path, 0)  # (what the other fold read: the mirror at version 0)
    for i in (1, 2):
        changes = spark.createDataFrame([(i, f"x{i}"), (100 + i, "new")], "id long, v string")
        DeltaTable.forPath(spark, path).alias("t").merge(changes.alias("s"), "t.id = s.id") \
            .whenMatchedUpdateAll().whenNotMatchedInsertAll().execute()
    calls = []

    def raced(spark_, hpath, path_, data, commit, *rest):
        calls.append(commit.version)
        if len(calls) == 1:  # the other fold creates it first, from version 0
            assert create(spark_, hpath, path_, data, first, *rest) == 10
        return create(spark_, hpath, path_, data, commit, *rest)
    monkeypatch.setattr(history, "_create", raced)
    folded = history.catch_up(spark, path, history.Of(["id"], False, "c", "app.t"))
    assert calls == [2] and folded is not None and (folded.first, folded.last) == (1, 2)
    assert (folded.opened, folded.closed) == (4, 2)
    fault = history_faults(spark, path, ["id"], samples=10)
    assert fault is None, fault
    assert history.catch_up(spark, path, history.Of(["id"], False, "c", "app.t")) is None  # (caught up)


def test_a_key_opened_and_gone_in_one_fold_is_closed_at_a_schema_change(spark, tmp_path) -> None:
    """One fold of a change (a key inserted) and a schema change (folded as a snapshot) without
    that key: the version the fold's first commit opened is closed by its second."""
    import pgcdc.lake.history as history
    from delta.tables import DeltaTable

    path = str(tmp_path / "app.t")
    spark.range(5).selectExpr("id", "cast(id as string) as v").write.format("delta") \
        .option("delta.enableChangeDataFeed", "true").save(path)
    assert history.catch_up(spark, path, history.Of(["id"], False, "c", "app.t")) is not None
    DeltaTable.forPath(spark, path).alias("t").merge(spark.createDataFrame([(21, "new")], "id long, v string")
                                                     .alias("s"), "t.id = s.id").whenNotMatchedInsertAll().execute()
    spark.range(5).selectExpr("id", "cast(id as string) as v", "7 as note").write.format("delta") \
        .mode("overwrite").option("overwriteSchema", "true").save(path)
    folded = history.catch_up(spark, path, history.Of(["id"], False, "c", "app.t"))
    assert folded is not None and (folded.first, folded.last, folded.opened) == (1, 2, 6)
    fault = history_faults(spark, path, ["id"], samples=10)
    assert fault is None, fault
    versions = spark.read.format("delta").load(history.history_path(path)).where("id = 21").collect()
    assert [(v._pgcdc_from_version, v._pgcdc_to_version, v._pgcdc_is_current) for v in versions] == [(1, 2, False)]


def test_a_history_behind_its_table_catches_up_before_a_schema_change_copies_it(db: psycopg.Connection, syncer,
                                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A run killed after the mirror's commit (`after-state-file`) leaves the history behind;
    a column dropped before the next run: the history folds the killed run's commit before the
    copy (Delta's change data feed cannot read a version from before a dropped column), and
    the key that commit opened, gone since, is closed by the copy."""
    import pgcdc.faults

    _table(db)
    syncer.run(**HISTORY)
    db.execute("insert into app.t values (21, 21, 's21')")

    def crash(name: str) -> None:
        if name == "after-state-file":
            raise KeyboardInterrupt("killed after the state file")
    monkeypatch.setattr(pgcdc.faults, "failpoint", crash)
    with pytest.raises(KeyboardInterrupt):
        syncer.run(**HISTORY)
    monkeypatch.undo()
    db.execute("delete from app.t where id = 21")
    db.execute("alter table app.t drop column s")
    syncer.run(**HISTORY)
    syncer.run(**HISTORY)
    versions = check_history(syncer, samples=1_000)
    assert [(v.s, v._pgcdc_is_current) for v in versions[21]] == [("s21", False)]
    assert {k for k, vs in versions.items() for v in vs if v._pgcdc_is_current} == set(range(1, 21))


def test_a_column_left_out_later_leaves_the_history_too(db: psycopg.Connection, syncer) -> None:
    """`attach --exclude-columns email` on a table synced with its history: the history is
    rewritten without email (every version, not only the current ones), verify finds both
    equal, and a column dropped in PostgreSQL (not left out) stays in the history as before."""
    from pgcdc.checks.verify import verify

    db.execute("create schema app; create table app.t (id int primary key, v int, s text, email text)")
    db.execute("insert into app.t select i, i, 's' || i, 'e' || i || '@x' from generate_series(1, 20) i")
    capture.attach(db, "app.t")
    syncer.run(**HISTORY)
    db.execute("update app.t set email = 'new@x' where id = 1")
    syncer.run(**HISTORY)
    capture.attach(db, "app.t", exclude_columns=["email"])
    t = next(a for a in capture.list_attached(db) if a.name == "app.t")
    before = verify(syncer.spark, db, str(syncer.root), [t], "test")[1]
    assert not before.equal and "holds email, which app.t leaves out" in before.line(), before.line()
    syncer.run(**HISTORY)
    history = syncer.spark.read.format("delta").load(syncer.path("app.t") + "__history")
    assert "email" not in history.columns and "email" not in syncer.delta("app.t").columns
    assert history.count() == 21  # (id 1's two versions, the others' one: none lost)
    check_history(syncer)
    db.execute("alter table app.t drop column s")
    syncer.run(**HISTORY)
    assert "s" in syncer.spark.read.format("delta").load(syncer.path("app.t") + "__history").columns
    found = verify(syncer.spark, db, str(syncer.root), [t], "test")
    assert [c.line() for c in found] == ["app.t: Delta equals PostgreSQL (20 rows)",
                                         "app.t (history): Delta equals PostgreSQL (20 rows)"]


def test_a_history_whose_creation_was_killed_is_created_by_the_next_fold(spark, tmp_path) -> None:
    """A kill after the creation wrote its rows' files, before its commit: the next fold of a
    table whose lease it holds clears those files and creates the history; a fan-in's (other
    workers may be creating it) says what to do instead of tripping over them; somebody's
    other files are never removed."""
    import shutil

    import pgcdc.lake.history as history
    from pgcdc.errors import TargetError
    from pgcdc.lake.target import clear_unfinished_create

    path = str(tmp_path / "app.t")
    spark.range(5).selectExpr("id", "cast(id as string) as v").write.format("delta") \
        .option("delta.enableChangeDataFeed", "true").save(path)
    hpath = history.history_path(path)
    spark.range(5).write.parquet(str(tmp_path / "rows"))
    (tmp_path / "app.t__history" / "_delta_log").mkdir(parents=True)
    for f in (tmp_path / "rows").glob("part-*.parquet"):
        shutil.copy(f, tmp_path / "app.t__history")
    with pytest.raises(TargetError, match="whose creation did not finish"):
        history.catch_up(spark, path, history.Of(["id"], False, "c", "app.t"))
    folded = history.catch_up(spark, path, history.Of(["id"], False, "c", "app.t", alone=True))
    assert folded is not None and folded.opened == 5
    assert spark.read.format("delta").load(hpath).count() == 5
    other = tmp_path / "other"
    (other / "_delta_log").mkdir(parents=True)
    (other / "notes.txt").write_text("somebody's")
    with pytest.raises(TargetError, match="notes.txt"):
        clear_unfinished_create(spark, str(other))
    assert (other / "notes.txt").exists()
