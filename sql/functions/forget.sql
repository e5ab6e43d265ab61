-- pgcdc._forget(table_id, reason): stop capturing an attached table and release what it pinned:
-- its pgcdc.attached row, its capture function (and triggers, if the table still exists) and
-- every consumer's state of it, so the queue no longer keeps its events. With a reason (the
-- table was dropped) it is recorded in pgcdc.forgotten with the Delta tables it was synced
-- into, for `pgcdc status` to name until `pgcdc detach` or a new attach acknowledges it.
-- Shared by detach, attach (attached again with other options) and the drop handling.
-- A fan-in source is recorded in pgcdc.shard_gone: consumers' runs remove its rows.
-- Touches: pgcdc.attached, pgcdc.consumer_state, pgcdc.forgotten, pgcdc.shard_gone, the capture function.
create or replace function pgcdc._forget(p_table_id int, reason text, p_name text default null)
returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $fn$
declare
    a pgcdc.attached;
begin
    delete from pgcdc.attached where table_id = p_table_id returning * into a;
    if a.table_id is null then
        return;
    end if;
    -- (from the table if it still exists, and from every partition whose triggers call its function)
    perform pgcdc._drop_capture_triggers((select c.oid::regclass from pg_class c where c.oid = a.relid), p_table_id);
    execute format('drop function if exists pgcdc.%I()', 'capture_' || p_table_id);
    if reason is not null then
        insert into pgcdc.forgotten (table_id, table_name, reason, targets)
        select p_table_id, coalesce(p_name, format('table_id %s', p_table_id)), reason,
               coalesce((select array_agg(distinct s.target order by s.target) from pgcdc.consumer_state s
                          where s.table_id = p_table_id), '{}')
        on conflict (table_id) do nothing;
    end if;
    delete from pgcdc.consumer_state where table_id = p_table_id;
    if a.into_table is not null then  -- a fan-in source: its rows leave the fan-in (pgcdc.shard_gone)
        insert into pgcdc.shard_gone as g (into_table, shard, table_name)
        values (a.into_table, a.shard, coalesce(p_name, a.table_name, a.relid::text))
        on conflict (into_table, shard) do update
            set table_name = excluded.table_name, keep_rows = false, at = now();
    end if;
end
$fn$;
