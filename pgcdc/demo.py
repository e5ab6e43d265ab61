"""`pgcdc demo`: the whole path on a throwaway PostgreSQL and a local Delta folder."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from pgcdc.db import connect, jdbc_options
from pgcdc.localpg import LocalPostgres

SAMPLE_SCHEMA = """
create schema shop;
create table shop.customers (id bigint primary key, name text not null, email text, created_at timestamptz default now());
create table shop.orders (
    id uuid primary key default gen_random_uuid(),
    customer_id bigint not null references shop.customers(id),
    amount numeric(12,2) not null,
    status text not null default 'new'
);
insert into shop.customers (id, name, email)
    select i, 'customer ' || i, 'c' || i || '@example.com' from generate_series(1, 100) i;
insert into shop.orders (customer_id, amount)
    select 1 + i % 100, (i * 7 % 1000) / 10.0 from generate_series(1, 500) i;
"""


def say(msg: str) -> None:
    print(f"[demo] {msg}", flush=True)


def run_demo(lake: Path = Path(".demo/lake")) -> None:
    """Start a local PostgreSQL, load a sample schema and copy it into Delta via Spark JDBC."""
    from pgcdc.spark import POSTGRES_JDBC, get_session

    shutil.rmtree(lake, ignore_errors=True)
    pg = LocalPostgres(Path(tempfile.mkdtemp(prefix="pgcdc-demo-pg-")))
    say(f"starting a throwaway PostgreSQL in {pg.datadir} on port {pg.port}")
    pg.start()
    try:
        with connect(pg.dsn()) as conn:
            conn.execute(SAMPLE_SCHEMA)
        say("sample schema shop.customers (100 rows) and shop.orders (500 rows) loaded")
        say(f"starting local Spark with Delta Lake and {POSTGRES_JDBC}")
        spark = get_session()
        target = lake.resolve() / "shop.customers"
        df = spark.read.format("jdbc").options(**jdbc_options(pg.dsn())).option("dbtable", "shop.customers").load()
        df.write.format("delta").mode("overwrite").save(str(target))
        count = spark.read.format("delta").load(str(target)).count()
        say(f"Spark + Delta verified: {count} rows of shop.customers written to {target}")
    finally:
        pg.stop(remove=True)
        say("local PostgreSQL stopped and removed")
    say(f"Delta tables are in {lake.resolve()}")
