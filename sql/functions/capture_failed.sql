-- pgcdc._capture_failed(table_id, error): what a capture function does when its own code no
-- longer fits the table (a column it names was renamed or dropped by DDL the pgcdc_ddl event
-- trigger did not see): queue a T event (every consumer copies the table; the event's payload
-- carries the error, which `pgcdc status` shows) and warn. The application's statement goes on.
-- Touches: pgcdc.commit_queue.
create or replace function pgcdc._capture_failed(p_table_id int, error text)
returns void
language plpgsql
security definer
set search_path = pg_catalog, pg_temp
as $fn$
declare
    a pgcdc.attached;
begin
    select * into a from pgcdc.attached where table_id = p_table_id;
    insert into pgcdc.commit_queue (txid, slot, table_id, op, shard, keys, payload)
    values (pg_current_xact_id(), pgcdc._slot(pg_current_xact_id()), p_table_id, 'T', a.shard, null,
            jsonb_build_object('capture_error', error));
    raise warning 'pgcdc: capture of % no longer fits the table (%): its next sync copies it', a.relid, error
        using hint = format('run `pgcdc attach %s` so capture follows the table again', a.relid);
end
$fn$;
