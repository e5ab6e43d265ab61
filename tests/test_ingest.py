"""The ingest job end to end: real PostgreSQL, real Spark + Delta; Delta must equal PostgreSQL."""

from __future__ import annotations

import psycopg
import pytest

from pgcdc import capture


def test_first_sync_then_inserts_updates_deletes(db: psycopg.Connection, syncer) -> None:
    db.execute("create table t (id bigint primary key, name text, amount numeric(10,2))")
    db.execute("insert into t select i, 'n' || i, i * 1.5 from generate_series(1, 50) i")
    capture.attach(db, "t")
    first = syncer.run()["public.t"]
    assert first.copied == 50
    syncer.assert_equal("public.t")

    db.execute("insert into t values (100, 'new', 1)")
    db.execute("update t set name = 'changed' where id <= 5")
    db.execute("delete from t where id between 10 and 14")
    report = syncer.run()["public.t"]
    assert (report.events, report.upserted, report.deleted, report.pending_events) == (3, 6, 5, 0)
    syncer.assert_equal("public.t")
    assert syncer.delta("public.t").count() == 46
