-- pgcdc.detach(tbl): stop capturing a table. Returns false if it was not attached.
-- Touches: the table's pgcdc triggers, its capture function, its pgcdc.attached row and
-- its consumer_state rows. Events already queued for it are ignored from now on.
create or replace function pgcdc.detach(tbl regclass)
returns boolean
language plpgsql
set search_path = pg_catalog, pg_temp
as $fn$
declare
    v_id int;
begin
    delete from pgcdc.attached where relid = tbl returning table_id into v_id;
    if v_id is null then
        return false;
    end if;
    perform pgcdc._drop_capture_triggers(tbl);
    execute format('drop function if exists pgcdc.%I()', 'capture_' || v_id);
    delete from pgcdc.consumer_state where table_id = v_id;
    return true;
end
$fn$;
