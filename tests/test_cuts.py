"""Passes as consistent cuts (sync/pass_cut.py, docs/readers.md), against real PostgreSQL, Spark and
Delta: after a pass, its tables read at the versions its cut names agree with each other as of
one snapshot of the database, even when a transaction commits between two tables' batches.

The oracle reads the cut files as plain JSON and the Delta tables with plain Spark
(`versionAsOf`); the bank's invariant (the balances of two tables add up to what they held at
the start) is PostgreSQL's, checked there too."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path
from typing import Any

import psycopg
import pytest

import pgcdc
from pgcdc.cli.main import main
from pgcdc.errors import TargetError
from pgcdc.lake import cuts
from pgcdc.source import capture
from pgcdc.sync.ingest import Job
from pgcdc.sync.runs import run_job
from fixtures.ingest import Syncer

TOTAL = 2 * 10 * 100  # two tables of ten accounts holding 100 each
CHUNKS = {"copies": {"chunk_rows": 1000, "chunk_seconds": 0}}  # (a table of more rows is copied in chunks)


def _bank(db: psycopg.Connection) -> None:
    for name in ("public.bank_a", "public.bank_b"):
        db.execute(f"create table {name} (id int primary key, balance bigint not null)")
        db.execute(f"insert into {name} select i, 100 from generate_series(1, 10) i")
        capture.attach(db, name)


def _transfer(dsn: str, source: int, dest: int, amount: int) -> None:
    """Move `amount` from bank_a's account `source` to bank_b's `dest` in one transaction."""
    with psycopg.connect(dsn) as conn:
        conn.execute("update bank_a set balance = balance - %s where id = %s", (amount, source))
        conn.execute("update bank_b set balance = balance + %s where id = %s", (amount, dest))


def _cut_files(root: Path, consumer: str = "test") -> list[dict[str, Any]]:
    """Every cut the consumer's passes wrote, oldest first, read as plain JSON."""
    folder = root / "_pgcdc" / "cuts" / consumer
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))] if folder.is_dir() else []


def _total(spark: Any, versions: dict[str, tuple[str, int | None]]) -> int:
    """The bank's total over the Delta tables at the given versions (None: the newest)."""
    total = 0
    for path, version in versions.values():
        reader = spark.read.format("delta")
        if version is not None:
            reader = reader.option("versionAsOf", version)
        total += reader.load(path).agg({"balance": "sum"}).collect()[0][0]
    return total


def _at(cut: dict[str, Any]) -> dict[str, tuple[str, int | None]]:
    return {name: (t["path"], t["version"]) for name, t in cut["tables"].items()}


def _transfer_between_tables(monkeypatch: pytest.MonkeyPatch, dsn: str) -> list[int]:
    """Commit a transfer between the accounts the pending one changed (so the second table's batch
    reads a row it changed) once the pass's first table has committed its batch, before the
    second reads."""
    import pgcdc.faults

    done: list[int] = []
    original = pgcdc.faults.failpoint

    def hook(name: str) -> None:
        original(name)
        if name == "after-commit" and not done:
            _transfer(dsn, 1, 1, 50)
            done.append(1)
    monkeypatch.setattr(pgcdc.faults, "failpoint", hook)
    return done


@pytest.mark.parametrize("engine", ["merge", "fast"])
def test_a_pass_reads_every_table_as_of_its_snapshot(spark, db: psycopg.Connection, syncer: Syncer, dsn: str,
                                                     tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     engine: str) -> None:
    """Either engine: the merge engine's rows come through Spark's JDBC reads (each connection
    imports the snapshot), the fast engine's small batch through the driver's connection."""
    _bank(db)
    syncer.run(engine=engine)  # first copies, registered before the pass's snapshot, read in it
    first = _cut_files(tmp_path / "lake")
    assert len(first) == 1 and set(first[0]["tables"]) == {"public.bank_a", "public.bank_b"}, first
    assert _total(syncer.spark, _at(first[0])) == TOTAL
    syncer.run(engine=engine)  # nothing to apply: both idle, both in the cut
    assert set(_cut_files(tmp_path / "lake")[-1]["tables"]) == {"public.bank_a", "public.bank_b"}

    _transfer(dsn, 1, 1, 30)  # applied by the next pass
    done = _transfer_between_tables(monkeypatch, dsn)  # committed during it: the pass must not show it
    syncer.run(engine=engine)
    assert done
    cut = _cut_files(tmp_path / "lake")[-1]
    assert set(cut["tables"]) == {"public.bank_a", "public.bank_b"}, cut["left_out"]
    assert _total(syncer.spark, _at(cut)) == TOTAL
    a = syncer.spark.read.format("delta").option("versionAsOf", cut["tables"]["public.bank_a"]["version"]) \
        .load(cut["tables"]["public.bank_a"]["path"])
    assert {r.id: r.balance for r in a.collect()} == {i: 100 - 30 * (i == 1) for i in range(1, 11)}

    monkeypatch.undo()
    syncer.run(engine=engine)  # the next pass takes the transfer in both tables
    cut = _cut_files(tmp_path / "lake")[-1]
    assert _total(syncer.spark, _at(cut)) == TOTAL
    syncer.assert_equal("public.bank_a")
    syncer.assert_equal("public.bank_b")


def test_without_cuts_a_transfer_between_two_tables_batches_breaks_the_total(
        spark, db: psycopg.Connection, syncer: Syncer, dsn: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """What the cut prevents (and what the test above would see without it): with `ingest.cuts`
    off, each table reads its rows as they are when it reads them."""
    _bank(db)
    syncer.run(cuts=False)
    _transfer(dsn, 1, 1, 30)
    _transfer_between_tables(monkeypatch, dsn)
    syncer.run(cuts=False)
    assert _cut_files(tmp_path / "lake") == []  # (no pass made a cut)
    newest = {t: (syncer.path(t), None) for t in ("public.bank_a", "public.bank_b")}
    assert _total(syncer.spark, newest) != TOTAL


def test_pgcdc_cut_and_read_cut_name_the_versions_the_pass_recorded(
        spark, db: psycopg.Connection, syncer: Syncer, tmp_path: Path) -> None:
    _bank(db)
    syncer.run()
    syncer.run()
    config = tmp_path / "pgcdc.toml"
    config.write_text(f'consumer = "test"\n[source]\ndsn = "{syncer.dsn}"\n[target]\nroot = "{syncer.root}"\n')
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["--config", str(config), "cut", "--json"]) == 0
    shown = json.loads(out.getvalue())
    recorded = _cut_files(tmp_path / "lake")[-1]
    assert shown["cut"] == recorded["name"] and shown["tables"] == recorded["tables"]
    frames = pgcdc.read_cut(spark, str(config))
    assert set(frames) == {"public.bank_a", "public.bank_b"}
    for name, frame in frames.items():
        plain = spark.read.format("delta").option("versionAsOf", recorded["tables"][name]["version"]) \
            .load(recorded["tables"][name]["path"])
        assert sorted(frame.collect()) == sorted(plain.collect())
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["--config", str(config), "cut", "public.bank_b"]) == 0
    assert "public.bank_b" in out.getvalue() and "public.bank_a" not in out.getvalue()


def test_tables_a_pass_cannot_bring_to_its_snapshot_are_left_out_and_named(
        spark, db: psycopg.Connection, syncer: Syncer, dsn: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A copy in chunks is left out (and made last, after the tables the cut holds); a pass past
    ingest.cut_seconds leaves the rest out; strict mode makes no cut. `pgcdc cut` then gives the
    newest cut that holds what is asked for, and fails naming why when none does."""
    _bank(db)
    syncer.run()
    syncer.run()
    complete = _cut_files(tmp_path / "lake")[-1]
    db.execute("create table big (id int primary key, v text)")
    db.execute("insert into big select i, 'x' from generate_series(1, 3000) i")
    db.execute("analyze big")
    capture.attach(db, "public.big")
    _transfer(dsn, 3, 3, 10)
    syncer.run(**CHUNKS)  # big's first copy, in chunks: last, the pass's snapshot let go first
    cut = _cut_files(tmp_path / "lake")[-1]
    assert set(cut["tables"]) == {"public.bank_a", "public.bank_b"}, cut["left_out"]
    assert "copied in chunks" in cut["left_out"]["public.big"]
    assert cuts.newest(None, str(syncer.root), "test", ["public.bank_a", "public.bank_b"]).name == cut["name"]
    with pytest.raises(TargetError, match=r"holds public\.big \(public\.big: copied in chunks"):
        cuts.newest(None, str(syncer.root), "test")
    assert complete["name"] != cut["name"]
    capture.detach(db, "public.big")

    _transfer(dsn, 4, 4, 10)
    syncer.run(cut_seconds=1e-6)
    late = _cut_files(tmp_path / "lake")[-1]
    assert late["tables"] == {}
    assert all("after ingest.cut_seconds" in why for why in late["left_out"].values()), late["left_out"]
    before = len(_cut_files(tmp_path / "lake"))
    syncer.run(mode="strict")
    assert len(_cut_files(tmp_path / "lake")) == before

    db.execute("create table bank_c (id int primary key, balance bigint not null)")
    db.execute("insert into bank_c select i, 0 from generate_series(1, 3000) i")
    db.execute("analyze bank_c")
    capture.attach(db, "public.bank_c")
    syncer.run(**CHUNKS)  # its first copy, in chunks: not in this cut, so in none
    config = tmp_path / "pgcdc.toml"
    config.write_text(f'consumer = "test"\n[source]\ndsn = "{syncer.dsn}"\n[target]\nroot = "{syncer.root}"\n')
    capsys.readouterr()
    for asked in (["public.bank_c"], []):
        assert main(["--config", str(config), "cut", *asked]) != 0
        err = capsys.readouterr().err
        assert re.search(r"no cut of consumer test .* holds public\.bank_c \(public\.bank_c: copied in chunks, "
                         r"each chunk in a snapshot of its own \(its first copy\)\)", err), err


def _table(table_id: int, name: str, into: str | None = None) -> Any:
    from pgcdc.source.capture import AttachedTable

    return AttachedTable(table_id, name, ["id"], ["integer"], None, table_id if into else None, into)


def test_a_cut_admits_only_states_committed_before_its_snapshot_and_a_fan_in_only_whole(tmp_path: Path) -> None:
    """Units of sync/pass_cut.py and lake/cuts.py (no Spark): a state another worker committed after the
    snapshot (a batch the pre-snapshot mirror did not show, nor a commit under way) is refused; a
    fan-in's Delta table is in the cut only with all its sources, at the newest of their versions;
    `newest` gives the newest cut holding what is asked for."""
    from pgcdc.source.events import Snapshot
    from pgcdc.source.snapshots import Held
    from pgcdc.sync.pass_cut import PassCut
    from pgcdc.watermark import ConsumerState

    held = Held(Snapshot(100, 105, (101,), False), "00000003-00000002-1")
    cut = PassCut(held, {1: (7, None), 2: (4, 5)}, 60)
    a, b, new = _table(1, "public.a"), _table(2, "public.b"), _table(3, "public.new")
    state = ConsumerState("c", "public.a", 1, "x", 90, batch=7)
    assert cut.admits(a, state) is None
    assert "another worker" in (cut.admits(a, ConsumerState("c", "public.a", 1, "x", 90, batch=8)) or "")
    assert cut.admits(b, ConsumerState("c", "public.b", 2, "x", 90, batch=5)) is None  # (under way before it)
    assert "first synced after" in (cut.admits(new, ConsumerState("c", "public.new", 3, "x", 90, batch=1)) or "")

    t1, t2 = _table(11, "tenant_1.orders", "public.orders"), _table(12, "tenant_2.orders", "public.orders")

    def at(t: Any, version: int | None) -> ConsumerState:
        return ConsumerState("c", t.name, t.table_id, "x", 90, batch=3, version=version)
    cut.join(a, "/lake/public.a", at(a, 12))
    cut.join(t1, "/lake/public.orders", at(t1, 30))
    cut.join(t2, "/lake/public.orders", at(t2, 31))
    cut.leave(b, "it failed: boom")
    made = cut.record("c", [a, b, t1, t2], [])
    assert made.tables["public.a"].version == 12
    assert made.tables["public.orders"].version == 31
    assert made.tables["public.orders"].sources == ["tenant_1.orders", "tenant_2.orders"]
    assert made.left_out == {"public.b": "it failed: boom"}

    partial = PassCut(held, {}, 60)
    partial.join(t1, "/lake/public.orders", at(t1, 40))
    partial.join(b, "/lake/public.b", at(b, None))
    partial.leave(t2, "a copy in chunks is under way")
    later = partial.record("c", [a, t1, t2], [])
    assert "public.orders" not in later.tables
    assert later.left_out["public.orders"] == "tenant_2.orders: a copy in chunks is under way"
    assert "public.a" in later.left_out  # (not reached)
    assert "Delta version is not known" in later.left_out["public.b"]
    narrowed = PassCut(held, {}, 60)  # (the consumer's `tables` takes tenant_1.orders in, not tenant_2.orders)
    narrowed.join(t1, "/lake/public.orders", at(t1, 40))
    alone = narrowed.record("c", [t1], [t2])
    assert "public.orders" not in alone.tables
    assert alone.left_out == {"public.orders": "tenant_2.orders: the consumer does not take it in (its `tables` "
                                               "setting), and it writes to this fan-in too"}

    root = str(tmp_path / "lake")
    cuts.write(None, root, made)
    later = cuts.Cut(**{**later.__dict__, "name": made.name + "1"})  # (named after it: newer)
    cuts.write(None, root, later)
    assert cuts.newest(None, root, "c", ["public.a", "tenant_1.orders"]).name == made.name
    with pytest.raises(Exception, match=r"no cut of consumer c .*holds public.x \(public.x: not a table"):
        cuts.newest(None, root, "c", ["public.x"])
    assert cuts.Cut.from_json(made.to_json()) == made
    # a worker whose clock lags writes a newer snapshot's cut under an older time: the snapshot wins
    lagging = cuts.Cut(**{**made.__dict__, "name": "19990101T000000000000Z-999", "snapshot": {"xmax": 999}})
    cuts.write(None, root, lagging)
    assert cuts.newest(None, root, "c", ["public.a"]).name == lagging.name
    # on a standby whose replay cancels a conflicting snapshot after 10 s, a cut holds it 5 s at most
    standby = PassCut(Held(Snapshot(100, 105, (), True, "0/1"), "00000003-00000002-1", limit=10), {}, 60)
    assert standby.seconds == 5 and "max_standby_streaming_delay" in standby.late()


def test_the_readers_doc_examples_read_a_cut(spark, db: psycopg.Connection, dsn: str, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/readers.md's Python examples, run as written against a cut of `orders` and `order_lines`."""
    db.execute("create table orders (id int primary key, total int not null)")
    db.execute("create table order_lines (order_id int, line int, amount int not null, primary key (order_id, line))")
    for name in ("public.orders", "public.order_lines"):
        capture.attach(db, name)
    db.execute("insert into orders select i, 30 from generate_series(1, 5) i")
    db.execute("insert into order_lines select i, l, 10 from generate_series(1, 5) i, generate_series(1, 3) l")
    syncer = Syncer(spark, dsn, tmp_path / "lake")
    syncer.run(consumer="default")
    db.execute("insert into orders values (6, 20)")
    db.execute("insert into order_lines values (6, 1, 20)")
    syncer.run(consumer="default")
    (tmp_path / "pgcdc.toml").write_text(f'[source]\ndsn = "{dsn}"\n[target]\nroot = "{syncer.root}"\n')
    monkeypatch.chdir(tmp_path)
    doc = (Path(__file__).parents[1] / "docs" / "readers.md").read_text()
    section = doc[doc.index("## Tables that agree with each other: cuts"):doc.index("## Iceberg readers")]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 2
    scope: dict[str, Any] = {"spark": spark, "root": str(syncer.root)}
    for block in blocks:
        exec(compile(block, "docs/readers.md", "exec"), scope)
    # the first block's DataFrames (Spark), the second's Arrow table (delta-rs), at the same cut
    assert scope["lines"].count() == 16
    assert scope["tables"]["public.orders"].count() == 6
    assert scope["orders"].column("n")[0].as_py() == 6


def test_a_fan_in_joins_a_cut_only_if_no_source_landed_again_between_its_sources_versions(
        spark, db: psycopg.Connection, syncer: Syncer) -> None:
    """A fan-in's Delta table is read at the newest of its sources' versions in the cut; a later
    batch of another source between them (another worker's, after the snapshot) would be read
    too, so the cut leaves the fan-in out (found in the Delta log: each commit's txn)."""
    from pgcdc.lake.state import load_state, state_from_history
    from pgcdc.source.events import Snapshot
    from pgcdc.source.snapshots import Held
    from pgcdc.sync.pass_cut import PassCut, write

    for n in (1, 2):
        db.execute(f"create schema tenant_{n}")
        db.execute(f"create table tenant_{n}.orders (id int primary key, v int not null)")
        db.execute(f"insert into tenant_{n}.orders select i, i from generate_series(1, 5) i")
        capture.attach(db, f"tenant_{n}.orders", shard=n, into="app.orders")
    tables = {t.name: t for t in capture.list_attached(db)}
    t1, t2 = tables["tenant_1.orders"], tables["tenant_2.orders"]
    path = syncer.path("app.orders")
    syncer.run()
    first = load_state(spark, path, "test@1")
    db.execute("update tenant_1.orders set v = v + 1 where id = 1")
    syncer.run()  # tenant_1's next batch
    db.execute("update tenant_2.orders set v = v + 1 where id = 1")
    syncer.run()  # then tenant_2's
    one, two = load_state(spark, path, "test@1"), load_state(spark, path, "test@2")
    assert first is not None and one is not None and two is not None
    first = state_from_history(spark, path, "test@1", first.batch)  # (with its version)
    assert first is not None and first.version < one.version < two.version

    def cut_of(s1: Any) -> Any:
        cut = PassCut(Held(Snapshot(1, 2, (), False), "00000003-00000002-1"), {}, 60)
        cut.join(t1, path, s1)
        cut.join(t2, path, two)
        return write(spark, str(syncer.root), "test", cut, [t1, t2], [t1, t2])
    stale = cut_of(first)  # tenant_1 as of before its later batch: that batch lies between
    assert "app.orders" not in stale.tables
    assert "applied again after this pass's snapshot" in stale.left_out["app.orders"]
    fresh = cut_of(one)
    assert fresh.tables["app.orders"].version == two.version
    assert fresh.tables["app.orders"].sources == ["tenant_1.orders", "tenant_2.orders"]


def test_a_pass_lets_its_snapshot_go_once_past_cut_seconds_the_last_table_reading_in_it_is_done(
        db: psycopg.Connection, dsn: str) -> None:
    """The snapshot holds back VACUUM: past `ingest.cut_seconds` no table starts reading in it, and
    the last one reading in it lets it go (the exporting transaction ends: importing it fails)."""
    import time

    from pgcdc.errors import TargetError
    from pgcdc.source import snapshots
    from pgcdc.source.db import connect
    from pgcdc.sync.pass_cut import PassCut

    with snapshots.hold(lambda: connect(dsn, reader=True)) as (held, release):
        released: list[int] = []

        def let_go() -> None:
            released.append(1)
            release()
        cut = PassCut(held, {}, 0.5, let_go)
        assert cut.enter("a") and cut.enter("(idle)")
        with psycopg.connect(dsn, autocommit=True) as other:
            with snapshots.importing(other, held):  # (while held, any connection may read in it)
                assert other.execute("select pg_current_snapshot()::text").fetchone()[0].split(":")[1] == \
                    str(held.snap.xmax)
        cut.exit("(idle)")
        time.sleep(0.6)
        assert not cut.enter("b") and not released  # past the deadline, but "a" still reads in it
        cut.exit("a")
        assert released == [1]
        cut.exit("a")
        assert released == [1]  # (once)
        with psycopg.connect(dsn, autocommit=True) as other:
            with pytest.raises(TargetError, match="could not import the pass's snapshot"):
                with snapshots.importing(other, held):
                    pass


def test_a_fan_in_whose_source_the_consumer_does_not_take_in_stays_out_of_its_cuts(
        spark, db: psycopg.Connection, syncer: Syncer, dsn: str) -> None:
    """A fan-in app.acct of tenant_1.acct and tenant_2.acct beside public.cash; the consumer's
    `tables` takes in tenant_1.acct and public.cash; transfers between tenant_2.acct and cash.
    The cut holds public.cash alone and names app.acct with the source it lacks; the bank's
    total over what the cut holds never claims a consistency it lacks."""
    db.execute("create table public.cash (id int primary key, balance bigint not null)")
    db.execute("insert into public.cash select i, 100 from generate_series(1, 5) i")
    capture.attach(db, "public.cash")
    for n in (1, 2):
        db.execute(f"create schema tenant_{n}")
        db.execute(f"create table tenant_{n}.acct (id int primary key, balance bigint not null)")
        db.execute(f"insert into tenant_{n}.acct select i, 100 from generate_series(1, 5) i")
        capture.attach(db, f"tenant_{n}.acct", shard=n, into="app.acct")
    narrowed = {"mode": "out_of_order", "tables": ["tenant_1.acct", "public.cash"]}
    syncer.run(**narrowed)
    for amount in (10, 20):
        with psycopg.connect(dsn) as conn:
            conn.execute("update tenant_2.acct set balance = balance - %s where id = 1", (amount,))
            conn.execute("update public.cash set balance = balance + %s where id = 1", (amount,))
        syncer.run(**narrowed)
    for made in _cut_files(syncer.root)[1:]:
        assert "app.acct" not in made["tables"] and "public.cash" in made["tables"]
        assert "tenant_2.acct: the consumer does not take it in" in made["left_out"]["app.acct"]
    both = {"mode": "out_of_order", "tables": ["tenant_1.acct", "tenant_2.acct", "public.cash"]}
    syncer.run(**both)  # widened: tenant_2.acct's first copy reads in the pass's snapshot: the fan-in joins
    newest = _cut_files(syncer.root)[-1]
    assert sorted(newest["tables"]) == ["app.acct", "public.cash"]
    assert _total(spark, _at(newest)) == 15 * 100


def _writer(dsn: str, seed: int, stop: Any) -> Any:
    """A thread moving money between random accounts of the two tables (either way) until `stop`."""
    import random
    import threading

    def move() -> None:
        rng = random.Random(seed)
        while not stop.is_set():
            _transfer(dsn, rng.randint(1, 10), rng.randint(1, 10), rng.randint(-40, 40))
    thread = threading.Thread(target=move, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("engine", ["fast", "merge"])
def test_small_tables_copied_whole_join_every_cut_under_the_bank_workload(
        spark, db: psycopg.Connection, syncer: Syncer, dsn: str, engine: str) -> None:
    """Jepsen's bank between two small tables, writers running through every pass, the defaults
    on (recopy_fraction 0.25: each pass's batch changes so much of a table that it is copied):
    each copy reads in the pass's snapshot, so every cut after the first copies holds both
    tables (the first copies' too), and they add up at the versions it names."""
    import os
    import threading

    seed = int(os.environ.get("PGCDC_SEED", "7"))
    print(f"seed {seed}")
    _bank(db)
    db.execute("analyze bank_a")
    db.execute("analyze bank_b")
    # a follower's passes: one long-lived Job (its connections kept), the first copies included
    job = Job(syncer.settings(engine=engine, recopy_fraction=0.25), syncer.spark, syncer.lines.append, following=True)
    stop = threading.Event()
    thread = _writer(dsn, seed, stop)
    copied = 0
    try:
        for _ in range(5):
            reports = run_job(job)
            copied += sum(1 for r in reports if r.copied is not None)
            cut = _cut_files(syncer.root)[-1]
            assert set(cut["tables"]) == {"public.bank_a", "public.bank_b"}, cut["left_out"]
            assert _total(spark, _at(cut)) == TOTAL, cut
    finally:
        stop.set()
        thread.join()
        job.close()
    assert copied >= 4, "the passes applied batches: the copy in the pass's snapshot went untested"
    syncer.run(engine=engine, recopy_fraction=0.25)
    syncer.assert_equal("public.bank_a")
    syncer.assert_equal("public.bank_b")


def test_a_table_truncated_after_the_pass_snapshot_leaves_its_cut(
        spark, db: psycopg.Connection, syncer: Syncer, dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A TRUNCATE (or a rewrite) committed after the pass took its snapshot makes PostgreSQL show
    the table empty to that snapshot: what the pass read of it may be wrong as of the snapshot,
    so the table leaves the cut, named; a TRUNCATE the snapshot shows is copied in it and joins."""
    import pgcdc.faults

    _bank(db)
    syncer.run()
    db.execute("truncate bank_b")  # (before the next pass's snapshot: copied in it, in its cut)
    db.execute("insert into bank_b select i, 100 from generate_series(1, 10) i")
    _transfer(dsn, 3, 3, 10)
    syncer.run()
    cut = _cut_files(syncer.root)[-1]
    assert set(cut["tables"]) == {"public.bank_a", "public.bank_b"}, cut["left_out"]
    assert _total(spark, _at(cut)) == TOTAL

    _transfer(dsn, 1, 1, 30)  # applied by the next pass, whose snapshot the TRUNCATE misses
    original, done = pgcdc.faults.failpoint, []

    def hook(name: str) -> None:
        original(name)
        if name == "after-commit" and not done:  # (bank_a's batch committed; bank_b's next)
            with psycopg.connect(dsn) as conn:
                conn.execute("truncate bank_b")
                conn.execute("insert into bank_b select i, 100 from generate_series(1, 10) i")
                conn.execute("update bank_a set balance = balance - 30 where id = 2")
                conn.execute("update bank_b set balance = balance + 30 where id = 2")
            done.append(1)
    monkeypatch.setattr(pgcdc.faults, "failpoint", hook)
    syncer.run()
    monkeypatch.undo()
    assert done
    cut = _cut_files(syncer.root)[-1]
    assert "public.bank_b" not in cut["tables"] and "truncated or rewritten after the pass's snapshot" in \
        cut["left_out"]["public.bank_b"], cut
    assert "public.bank_a" in cut["tables"]
    syncer.run()
    syncer.assert_equal("public.bank_a")
    syncer.assert_equal("public.bank_b")



def test_no_snapshot_of_the_pass_is_held_while_a_copy_in_chunks_runs(
        spark, db: psycopg.Connection, syncer: Syncer, dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pass with a cut lets its snapshot go before a copy in chunks begins (the copy comes after
    the tables the cut holds): at every chunk's commit, the one session of the run holding a
    snapshot is the chunk's own reader."""
    import pgcdc.faults

    _bank(db)
    syncer.run()
    db.execute("create table big (id int primary key, v text)")
    db.execute("insert into big select i, 'x' from generate_series(1, 3000) i")
    db.execute("analyze big")
    capture.attach(db, "public.big")
    _transfer(dsn, 2, 2, 5)
    original, holding = pgcdc.faults.failpoint, []

    def hook(name: str) -> None:
        original(name)
        if name == "before-chunk-commit":
            with psycopg.connect(dsn, autocommit=True) as conn:
                holding.append(conn.execute(
                    "select count(*) from pg_stat_activity where backend_type = 'client backend' "
                    "and backend_xmin is not null and pid <> pg_backend_pid() and datname = current_database()"
                ).fetchone()[0])
    monkeypatch.setattr(pgcdc.faults, "failpoint", hook)
    syncer.run(**CHUNKS)
    assert holding == [1, 1, 1], holding
    cut = _cut_files(syncer.root)[-1]
    assert set(cut["tables"]) == {"public.bank_a", "public.bank_b"}, cut["left_out"]
    assert _total(spark, _at(cut)) == TOTAL
    syncer.assert_equal("public.big")
