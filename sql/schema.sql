-- pgcdc schema: tables only; functions live in sql/functions/, one per file.
-- Safe to re-run: every statement is "if not exists". Touches only the pgcdc schema.

create schema if not exists pgcdc;

-- Key/value facts about the installation (schema_version, partition_size, identity: the
-- "<system identifier>/<database oid>" of the database the queue's txids belong to; a
-- dump restored elsewhere, or into a new database, carries a stale one).
create table if not exists pgcdc.meta (
    key   text primary key,
    value text not null
);
insert into pgcdc.meta (key, value) values ('partition_size', '16777216') on conflict do nothing;

-- One row per attached table: how its keys are read and which rows are captured.
create table if not exists pgcdc.attached (
    table_id    int generated always as identity primary key,
    relid       regclass not null unique,
    key_columns text[] not null,          -- in key order
    key_types   text[] not null,          -- format_type() of each key column
    predicate   text,                     -- SQL boolean expression on the table's columns, or null
    shard       int,                      -- routing number copied into every event, or null
    attached_at timestamptz not null default now()
);

-- The commit queue: one row per statement (or per chunk of a large statement).
-- keys holds the changed primary keys as text: the key value for one-column keys,
-- a text[] literal of the values for composite keys. Partitioned by txid so that
-- consumed history is dropped with its partition instead of DELETE + VACUUM.
create table if not exists pgcdc.commit_queue (
    txid     xid8 not null,               -- pg_current_xact_id() of the writing transaction
    table_id int not null,
    op       "char" not null,             -- I U D T (truncate) B (backfill) C (control)
    shard    int,
    at       timestamptz not null default now(),
    keys     text[],                      -- null for T and C
    payload  jsonb                        -- control events only
) partition by range (txid);

create table if not exists pgcdc.commit_queue_default partition of pgcdc.commit_queue default;

-- Readers take txid ranges (a batch); xid8 has no BRIN operator class, so a btree it is.
create index if not exists commit_queue_txid on pgcdc.commit_queue (txid);

-- The PostgreSQL mirror of each consumer's per-table state (the Delta commit holds the truth).
create table if not exists pgcdc.consumer_state (
    consumer     text not null,
    table_id     int not null,
    target       text not null,           -- Delta table path
    watermark    xid8 not null,           -- every event below it is applied
    out_of_order text not null default '',-- applied txids at or above the watermark, as ranges "a-b,c"
    batch        bigint not null,         -- Delta txn version of the last applied batch
    updated_at   timestamptz not null default now(),
    primary key (consumer, table_id)
);

-- The highest batch number whose Delta commit a consumer started, written before that commit:
-- a database that lacks it (restored to an earlier point, failed over to a standby that was
-- behind) is refused before anything is written. Null: not known yet (written by the next batch).
alter table pgcdc.consumer_state add column if not exists committing bigint;

-- Each consumer's last ingest run, for `pgcdc status`: a run that failed or never finished,
-- and the txmin it started with (every table's watermark must reach it when the run succeeds).
create table if not exists pgcdc.consumer_run (
    consumer    text primary key,
    started_at  timestamptz not null,
    finished_at timestamptz,
    ok          boolean,
    error       text,
    start_txmin xid8
);
