"""`pgcdc demo`: the whole path on a throwaway PostgreSQL, local Spark and a local Delta folder.

Sample schema -> install -> attach -> writes -> ingest (first sync) -> more writes
(inserts, updates, deletes, a key change) -> ingest -> verify Delta equals PostgreSQL.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from pgcdc.errors import PgcdcError
from pgcdc.localpg import LocalPostgres
from pgcdc.settings import Settings
from pgcdc.source import capture
from pgcdc.source.selection import select_tables
from pgcdc.source.db import connect
from pgcdc.spark.session import get_session
from pgcdc.sync.runs import run
from pgcdc.checks.status import status_report
from pgcdc.checks.verify import verify

SAMPLE_SCHEMA = """
create schema shop;
create table shop.customers (id bigint primary key, name text not null, email text, vip boolean default false,
                             created_at timestamptz default now());
create table shop.orders (
    id uuid primary key default gen_random_uuid(),
    customer_id bigint not null references shop.customers(id) on delete cascade on update cascade,
    amount numeric(12,2) not null,
    status text not null default 'new',
    items jsonb
);
insert into shop.customers (id, name, email)
    select i, 'customer ' || i, 'c' || i || '@example.com' from generate_series(1, 100) i;
insert into shop.orders (customer_id, amount, items)
    select 1 + i % 100, (i * 7 % 1000) / 10.0, jsonb_build_array(jsonb_build_object('sku', i % 13, 'qty', 1 + i % 3))
      from generate_series(1, 500) i;
"""

ROUND_1 = """
update shop.customers set vip = true where id % 10 = 0;
insert into shop.orders (customer_id, amount) select id, 99.90 from shop.customers where vip;
"""

ROUND_2 = """
insert into shop.customers (id, name) values (101, 'new customer'), (102, 'another one');
update shop.orders set status = 'shipped' where amount > 50;
delete from shop.customers where id between 40 and 44;  -- cascades to their orders
update shop.customers set id = 1000 where id = 1;        -- a primary key change
"""


def say(msg: str) -> None:
    print(f"[demo] {msg}", flush=True)


def run_demo(lake: Path = Path(".demo/lake")) -> None:
    """Run the demo; raise PgcdcError if Delta does not end up equal to PostgreSQL."""
    shutil.rmtree(lake, ignore_errors=True)
    pg = LocalPostgres(Path(tempfile.mkdtemp(prefix="pgcdc-demo-pg-")))
    say(f"starting a throwaway PostgreSQL in {pg.workdir} on port {pg.port}")
    pg.start()
    try:
        # (pydantic validates the sections from plain dicts; the environment still applies)
        settings = Settings(source={"dsn": pg.dsn()}, target={"root": str(lake)},  # type: ignore[arg-type]
                            consumer="demo")
        with connect(pg.dsn()) as conn:
            conn.execute(SAMPLE_SCHEMA)
            say("sample schema: shop.customers (100 rows), shop.orders (500 rows, uuid keys)")
            capture.install(conn)
            say(f"pgcdc installed (schema version {capture.SCHEMA_VERSION})")
            for table in ("shop.customers", "shop.orders"):
                capture.attach(conn, table)
                say(f"attached {table}")
            conn.execute(ROUND_1)
            say("writes: 10 customers became vip, 10 orders added")

            spark = get_session(settings.spark, target_root=settings.target.root)
            say("ingest #1 (first sync copies each table, then applies queued changes)")
            run(settings, spark)
            conn.execute(ROUND_2)
            say("writes: 2 inserts, orders shipped, 5 customers deleted (with their orders), a primary key change")
            say("ingest #2 (only the changed keys are read and applied)")
            run(settings, spark)

            results = verify(spark, conn, settings.target.root, select_tables(conn, []))
            for r in results:
                say(r.line())
            print(status_report(conn)[0])
            if not all(r.equal for r in results):
                raise PgcdcError("demo failed: Delta differs from PostgreSQL")
    finally:
        pg.stop(remove=True)
        say("local PostgreSQL stopped and removed")
    say(f"Delta tables are in {lake.resolve()}; read them with "
        f"spark.read.format('delta').load('{lake.resolve()}/shop.orders')")
