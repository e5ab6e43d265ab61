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
