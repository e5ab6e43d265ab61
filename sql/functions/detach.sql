-- pgcdc.detach(tbl): stop capturing a table. Returns false if it was not attached.
-- Touches: the table's pgcdc triggers, its capture function, its pgcdc.attached row and
-- its consumer_state rows (pgcdc._forget). Events already queued for it are ignored from now on.
create or replace function pgcdc.detach(tbl regclass)
returns boolean
language plpgsql
set search_path = pg_catalog, pg_temp
as $fn$
declare
    v_id int;
begin
    perform pgcdc._forget_dropped();
    select table_id into v_id from pgcdc.attached where relid = tbl;
    if v_id is null then
        return false;
    end if;
    perform pgcdc._forget(v_id, null);
    return true;
end
$fn$;

-- pgcdc.acknowledge_dropped(name): forget the record of a dropped attached table (`pgcdc detach
-- NAME` of a table that no longer exists). Returns false if none was recorded under that name.
create or replace function pgcdc.acknowledge_dropped(name text)
returns boolean
language sql
set search_path = pg_catalog, pg_temp
as $$
    with gone as (delete from pgcdc.forgotten f where f.table_name = name returning 1)
    select exists (select 1 from gone)
$$;
