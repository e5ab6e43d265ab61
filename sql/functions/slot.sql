-- pgcdc._slot(txid): the queue slot of a txid, (txid / slot_txids) % queue_slots. The capture
-- functions inline the same expression with the values of pgcdc.meta (regenerated on change).
create or replace function pgcdc._slot(txid xid8)
returns int2
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
    select ((txid::text::bigint / max(value::bigint) filter (where key = 'slot_txids'))
            % max(value::bigint) filter (where key = 'queue_slots'))::int2
      from pgcdc.meta
$$;

-- pgcdc._queue_copy(table_id): queue a T event for an attached table in the current transaction:
-- every consumer copies the table again (its rows changed where no capture trigger saw them: DDL
-- that rewrote it, a partition attached with rows, detached or dropped). Called by the event
-- triggers (as the installer) and attach. Touches: pgcdc.commit_queue.
create or replace function pgcdc._queue_copy(p_table_id int)
returns void
language sql
set search_path = pg_catalog, pg_temp
as $$
    insert into pgcdc.commit_queue (txid, slot, table_id, op, shard, keys)
    select pg_current_xact_id(), pgcdc._slot(pg_current_xact_id()), a.table_id, 'T', a.shard, null
      from pgcdc.attached a where a.table_id = p_table_id
$$;

-- pgcdc._queue_keys(table_id, rel): queue the key of every row of table `rel` (a leaf of the
-- attached partitioned table's tree, attached to it or detached from it) as U events of the
-- attached table, in chunks of 10000 keys, in the current transaction: each consumer reads those
-- keys from the root as it reads any batch (a row now there lands, one gone is deleted), so the
-- rows a partition brought or took away are copied bounded to it, not with the whole table.
-- Keys that turn out unchanged cost a lookup and nothing else. A leaf this role may not read
-- (or no ordinary table) queues a copy of the whole table instead. Called by the event trigger
-- (as the installer); the key text as capture makes it (_key_expr, the same pinned settings).
-- Touches: pgcdc.commit_queue.
create or replace function pgcdc._queue_keys(p_table_id int, p_rel regclass)
returns void
language plpgsql
set search_path = pg_catalog, pg_temp
set datestyle to 'ISO, YMD'
set intervalstyle to 'postgres'
set timezone to 'UTC'
as $fn$
declare
    a pgcdc.attached;
begin
    select * into strict a from pgcdc.attached t where t.table_id = p_table_id;
    if (select c.relkind from pg_class c where c.oid = p_rel) is distinct from 'r' then
        perform pgcdc._queue_copy(p_table_id);
        return;
    end if;
    begin
        execute format($q$insert into pgcdc.commit_queue (txid, slot, table_id, op, shard, keys)
            select pg_current_xact_id(), pgcdc._slot(pg_current_xact_id()), %s, 'U', %s, array_agg(r.k)
              from (select s.k, (row_number() over () - 1) / 10000 as g from (select %s as k from only %s) s) r
             group by r.g$q$, a.table_id, coalesce(a.shard::text, 'null'), pgcdc._key_expr(a.key_columns), p_rel);
    exception when insufficient_privilege then
        perform pgcdc._queue_copy(p_table_id);
    end;
end
$fn$;
