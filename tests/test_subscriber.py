"""A table fed by logical replication: its apply worker writes under session_replication_role =
replica, which ordinary triggers skip. Attached with `on_subscriber`, capture fires then too
(ENABLE ALWAYS) and Delta equals the subscriber's table while the publisher writes; a table
attached without it is not captured (the control). A real publication on a second local
PostgreSQL (wal_level = logical) and a real subscription in the test database."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from fixtures.ingest import Syncer
from pgcdc.checks.status import status_data
from pgcdc.checks.verify import verify
from pgcdc.localpg import LocalPostgres
from pgcdc.source import capture

SHAPE = "create table {} (id int primary key, v text not null, n int)"


@pytest.fixture
def publisher() -> Iterator[LocalPostgres]:
    server = LocalPostgres(Path(tempfile.mkdtemp(prefix="pgcdc-test-publisher-")),
                           settings={"wal_level": "logical"}).start()
    try:
        yield server
    finally:
        server.stop(remove=True)


def _caught_up(db: psycopg.Connection, pub: psycopg.Connection, timeout: float = 60) -> None:
    """Wait until the subscriber's tables hold what the publisher's hold."""
    deadline = time.monotonic() + timeout
    want = [pub.execute(f"select count(*), sum(hashtext(t::text)) from {t} t").fetchone() for t in ("s", "c")]
    while [db.execute(f"select count(*), sum(hashtext(t::text)) from {t} t").fetchone() for t in ("s", "c")] != want:
        assert time.monotonic() < deadline, "the subscription did not catch up"
        time.sleep(0.2)


def test_a_table_a_subscription_writes_is_captured_with_on_subscriber(db: psycopg.Connection, syncer: Syncer,
                                                                       publisher: LocalPostgres) -> None:
    with psycopg.connect(publisher.dsn(), autocommit=True) as pub:
        for name in ("s", "c"):
            pub.execute(SHAPE.format(name))
            db.execute(SHAPE.format(name))
            pub.execute(f"insert into {name} select i, 'v' || i, i from generate_series(1, 500) i")
        pub.execute("create publication pgcdc_test for table s, c")
        capture.attach(db, "s", on_subscriber=True)
        capture.attach(db, "c")  # (the control: capture as an origin's triggers fire)
        triggers = dict(db.execute("select tgname, tgenabled from pg_trigger where tgrelid = 's'::regclass "
                                   "and tgname like 'pgcdc_capture_%'").fetchall())
        # the statement triggers fire for the origin's writes, the row trigger for the apply worker's alone
        assert triggers == {"pgcdc_capture_ins": "O", "pgcdc_capture_upd": "O", "pgcdc_capture_pk": "O",
                            "pgcdc_capture_del": "O", "pgcdc_capture_trunc": "A", "pgcdc_capture_row": "R"}, triggers
        assert not [p for p in status_data(db)["problems"] if "capture" in p], status_data(db)["problems"]
        db.execute(f"create subscription pgcdc_test connection '{publisher.dsn()}' publication pgcdc_test")
        try:
            _caught_up(db, pub)
            syncer.run()  # (the first copy)
            for round_ in range(3):
                for name in ("s", "c"):
                    pub.execute(f"update {name} set v = v || '+', n = n + 1 where id % 7 = {round_}")
                    pub.execute(f"delete from {name} where id % 11 = {round_}")
                    pub.execute(f"insert into {name} select i, 'new', {round_} from generate_series("
                                f"{1000 + 100 * round_}, {1050 + 100 * round_}) i")
                _caught_up(db, pub)
                syncer.run()
            db.execute("update s set v = 'local' where id = 3")  # (a local write: the statement triggers, once)
            assert [op for op, in db.execute("select q.op from pgcdc.commit_queue q join pgcdc.attached a "
                                             "using (table_id) where a.relid = 's'::regclass and "
                                             "'3' = any(q.keys)")] == ["U"]
            syncer.run()
            syncer.assert_equal("public.s")
            results = {r.table: r for r in verify(syncer.spark, db, str(syncer.root), capture.list_attached(db),
                                                   consumer="test")}
            assert results["public.s"].equal, results["public.s"].line()
            assert not results["public.c"].equal  # (its subscription's writes were never captured)
            # attached again without the option: back to firing as an origin's triggers do
            capture.attach(db, "s")
            assert {r[0] for r in db.execute("select tgenabled from pg_trigger where tgrelid = 's'::regclass "
                                             "and tgname like 'pgcdc_capture_%'")} == {"O"}
            assert db.execute("select count(*) from pg_trigger where tgname = 'pgcdc_capture_row'").fetchone()[0] == 0
        finally:
            db.execute("drop subscription pgcdc_test")
