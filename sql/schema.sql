-- pgcdc schema: tables only; functions live in sql/functions/, one per file.
-- Safe to re-run: every statement is "if not exists". Touches only the pgcdc schema.

create schema if not exists pgcdc;

-- Key/value facts about the installation (schema_version, queue layout, retention, identity: the
-- "<system identifier>/<database oid>" of the database the queue's txids belong to; a
-- dump restored elsewhere, or into a new database, carries a stale one).
create table if not exists pgcdc.meta (
    key   text primary key,
    value text not null
);

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

-- Queue layout (meta): events go to one of `queue_slots` partitions by txid, `slot_txids`
-- txids per slot in turn, so consumed history is reclaimed by TRUNCATE of a slot whose rows
-- every consumer has passed (pgcdc.maintain) instead of DELETE + VACUUM, and no DDL but that
-- TRUNCATE ever runs on the queue. The capture code inlines slot_txids (regenerated on change).
insert into pgcdc.meta (key, value) values ('queue_slots', '4'), ('slot_txids', '262144'),
    ('retention_max_age', '7 days') on conflict do nothing;
delete from pgcdc.meta where key = 'maintain';
delete from pgcdc.meta where key = 'partition_size';  -- (schema v2's txid-range partitions)

-- Schema v2 partitioned the queue by txid range with a default partition: move its events
-- into the slot layout (an upgrade holds the queue's lock while it copies).
do $upgrade$
begin
    if exists (select 1 from pg_partitioned_table where partrelid = to_regclass('pgcdc.commit_queue')
                                                     and partstrat = 'r') then
        alter table pgcdc.commit_queue rename to commit_queue_v2;
        alter index pgcdc.commit_queue_txid rename to commit_queue_v2_txid;
    end if;
end
$upgrade$;

-- The commit queue: one row per statement (or per chunk of a large statement).
-- keys holds the changed primary keys as text: the key value for one-column keys,
-- a text[] literal of the values for composite keys.
create table if not exists pgcdc.commit_queue (
    txid     xid8 not null,               -- pg_current_xact_id() of the writing transaction
    slot     smallint not null,           -- (txid / slot_txids) % queue_slots: the partition
    table_id int not null,
    op       "char" not null,             -- I U D T (truncate) B (backfill) C (control)
    shard    int,
    at       timestamptz not null default now(),
    keys     text[],                      -- null for T and C
    payload  jsonb                        -- control events only
) partition by list (slot);

do $slots$
declare
    n int := (select value::int from pgcdc.meta where key = 'queue_slots');
begin
    for s in 0 .. n - 1 loop
        execute format('create table if not exists pgcdc.%I partition of pgcdc.commit_queue for values in (%s)',
                       'commit_queue_s' || s, s);
    end loop;
end
$slots$;

-- Readers take txid ranges (a batch); xid8 has no BRIN operator class, so a btree it is.
create index if not exists commit_queue_txid on pgcdc.commit_queue (txid);

do $upgrade$
begin
    if to_regclass('pgcdc.commit_queue_v2') is not null then
        insert into pgcdc.commit_queue (txid, slot, table_id, op, shard, at, keys, payload)
        select txid, (txid::text::bigint / m.size) % m.slots, table_id, op, shard, at, keys, payload
          from pgcdc.commit_queue_v2,
               (select max(value::bigint) filter (where key = 'slot_txids') as size,
                       max(value::bigint) filter (where key = 'queue_slots') as slots from pgcdc.meta) m;
        drop table pgcdc.commit_queue_v2;
    end if;
end
$upgrade$;

-- Consumers by name; the id keys each consumer's advisory lock (two names never share one).
create table if not exists pgcdc.consumer (
    consumer_id   int generated always as identity primary key,
    name          text not null unique,
    registered_at timestamptz not null default now()
);

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

-- Set by pgcdc.maintain when a consumer fell past the retention limit (pgcdc.meta
-- retention_max_age / retention_max_bytes): its next ingest copies the table again, so the
-- queue keeps nothing for it (its watermark stops counting) but, once that copy has registered,
-- the events from copy_from on. Null: healthy.
alter table pgcdc.consumer_state add column if not exists resync_reason text;
alter table pgcdc.consumer_state add column if not exists copy_from xid8;

insert into pgcdc.consumer (name)
select consumer from pgcdc.consumer_state union select consumer from pgcdc.consumer_run
on conflict (name) do nothing;

-- The key columns by number (renames leave them), and the table's column shape (names and
-- types) when its capture code was generated: DDL that changes the shape makes pgcdc._on_ddl
-- regenerate the capture code and queue a copy of the table.
alter table pgcdc.attached add column if not exists key_attnums int2[];
alter table pgcdc.attached add column if not exists shape text;
-- Each column's type by number when the capture code was generated (pgcdc._types): a rewrite that
-- only widens types (pgcdc._on_rewrite) needs no copy.
alter table pgcdc.attached add column if not exists types jsonb;
update pgcdc.attached a
   set key_attnums = (select array_agg(t.attnum order by u.o) from unnest(a.key_columns) with ordinality u(c, o)
                        join pg_attribute t on t.attrelid = a.relid and t.attname = u.c)
 where key_attnums is null;

-- The columns an attach predicate names (capture checks they keep their names), and the table's
-- name as last seen (attach, the pgcdc_ddl event trigger): a dropped table is named by it.
alter table pgcdc.attached add column if not exists predicate_columns text[];
alter table pgcdc.attached add column if not exists table_name text;

-- Consumer leases (sql/functions/consumer_lock.sql): the backend running the consumer's ingest
-- and the random advisory key it holds meanwhile.
alter table pgcdc.consumer add column if not exists lock_key int;
alter table pgcdc.consumer add column if not exists lock_pid int;

-- A partitioned table's tree as its capture code was made (pgcdc._generate_capture): every
-- table of it, the root first, each with capture triggers; null for a table that is not
-- partitioned. A tree that no longer matches (a partition created, attached, detached or dropped
-- where no event trigger saw it) is named by pgcdc._capture_gap, and the table is copied.
alter table pgcdc.attached add column if not exists members oid[];

-- Fan-in (`pgcdc attach SRC --into NAME --shard N`): source tables of the same shape that land
-- in one Delta table, named `into_table`, each source's rows under its shard (a key column
-- there, docs/fan-in.md). A shard is one source's in its Delta table.
alter table pgcdc.attached add column if not exists into_table text;
create unique index if not exists attached_into_shard on pgcdc.attached (into_table, shard)
    where into_table is not null;
-- The column a table's Delta table is partitioned by (`attach --delta-partition-by`), or null.
alter table pgcdc.attached add column if not exists delta_partition_by text;

-- Fan-in sources that left (detached, dropped, attached elsewhere): each consumer's next run
-- removes their rows from its Delta table of the fan-in, unless `keep_rows` (`pgcdc detach
-- --keep-rows`). Attaching a source under that shard again ends it.
create table if not exists pgcdc.shard_gone (
    into_table text not null,
    shard      int not null,
    table_name text not null,
    keep_rows  boolean not null default false,
    at         timestamptz not null default now(),
    primary key (into_table, shard)
);

-- The workers of a consumer (sql/functions/worker_lock.sql): each ingest process sharing the
-- consumer's tables, its backend and the random advisory key that backend holds while it works.
create table if not exists pgcdc.consumer_worker (
    consumer text not null references pgcdc.consumer (name) on delete cascade,
    pid      int not null,
    lock_key int not null,
    worker   text not null,
    since    timestamptz not null default now(),
    primary key (consumer, pid)
);
-- Per-table leases of a consumer's workers: a table is applied by the worker (backend `pid`)
-- whose row this is while that worker is alive (pgcdc._worker_alive).
create table if not exists pgcdc.table_lease (
    consumer text not null references pgcdc.consumer (name) on delete cascade,
    table_id int not null,
    pid      int not null,
    since    timestamptz not null default now(),
    primary key (consumer, table_id)
);

-- Each consumer's `tables` setting (names and patterns, pgcdc.source.selection) as its last run
-- gave it: `pgcdc status` names each table a consumer should sync and does not. '{}': every
-- attached table; null: not known (no run since the consumer was registered).
alter table pgcdc.consumer add column if not exists tables text[];
-- The tables the consumer's last run failed on, each with the first line of its error.
alter table pgcdc.consumer_run add column if not exists table_errors jsonb;

-- Attached tables that were dropped (detached by pgcdc._forget): `pgcdc status` names them and
-- the Delta tables they were synced into until `pgcdc detach NAME` (or attaching it again).
create table if not exists pgcdc.forgotten (
    table_id   int primary key,
    table_name text not null,
    reason     text not null,
    targets    text[] not null default '{}',
    at         timestamptz not null default now()
);

-- Roles `pgcdc grant` made readers or admins: attach grants readers SELECT on each new table.
create table if not exists pgcdc.grantee (
    role_name text primary key,
    kind      text not null check (kind in ('reader', 'admin'))
);

-- Schemas attached whole (`pgcdc attach --schema`): a table created there later and not attached
-- is named by `pgcdc status` and each run. `refused`: the tables attach found it could not
-- capture (named then, with the reason), which are not named again.
create table if not exists pgcdc.attached_schema (
    schema_oid  oid primary key,
    refused     oid[] not null default '{}',
    attached_at timestamptz not null default now()
);

-- What a schema attached whole leaves out of each of its tables (`attach --schema S
-- --exclude-columns ...`): names, kept by pgcdc.attach for every table of the schema it attaches,
-- now or later, and for columns of those names added later.
alter table pgcdc.attached_schema add column if not exists exclude_columns text[] not null default '{}';

-- A copy in chunks under way (sync/chunked_copy.py): the progress its last chunk committed, as JSON
-- {"chunks", "rows", "total" (estimated; 0: unknown), "started" (epoch seconds)}, for `pgcdc
-- status`; null: no copy under way.
alter table pgcdc.consumer_state add column if not exists copy_progress jsonb;

-- The columns a table's sync reads (`pgcdc attach --columns` / `--exclude-columns`,
-- docs/columns.md): column_mode 'only' keeps the columns numbered column_attnums (and the key);
-- 'except' leaves out the columns numbered column_attnums and any column named in column_names
-- (a column renamed, or dropped and added again, stays out); null reads every column.
-- pgcdc._kept decides, for the sync's column list and the readers' column grants alike.
alter table pgcdc.attached add column if not exists column_mode text check (column_mode in ('only', 'except'));
alter table pgcdc.attached add column if not exists column_attnums int2[];
alter table pgcdc.attached add column if not exists column_names text[];

-- Each partition of a partitioned table's tree, described by its bound when the capture code was
-- generated (pgcdc._partition_bounds): a partition truncated or dropped queues a T event that
-- carries it, and consumers replace that partition's rows alone.
alter table pgcdc.attached add column if not exists bounds jsonb;

-- Capture that also fires under session_replication_role = replica (`pgcdc attach --on-subscriber`):
-- a table fed by a logical replication subscription, whose apply worker writes so.
alter table pgcdc.attached add column if not exists on_subscriber boolean not null default false;

-- A schema attached whole with --follow-new: a table created there later (or a partition
-- detached into it) is attached by itself (pgcdc.follow_new), from the DDL event trigger or the
-- next run.
alter table pgcdc.attached_schema add column if not exists follow boolean not null default false;
