-- pgcdc._forget_dropped(): forget attached tables that no longer exist (dropped where no
-- pgcdc_drop event trigger saw it: an install without superuser rights). Called by install,
-- attach, detach, maintain (so each ingest run) and status. SECURITY DEFINER (pinned
-- search_path, no input) so a reader role's status or maintain call can release what a
-- dropped table pinned. Returns the forgotten table_ids.
create or replace function pgcdc._forget_dropped()
returns setof int
language plpgsql
security definer
set search_path = pg_catalog, pg_temp
as $fn$
declare
    v_id int;
begin
    for v_id in select a.table_id from pgcdc.attached a
                 where not exists (select 1 from pg_class c where c.oid = a.relid)
    loop
        perform pgcdc._forget(v_id, 'dropped', (select a.table_name from pgcdc.attached a where a.table_id = v_id));
        return next v_id;
    end loop;
end
$fn$;
