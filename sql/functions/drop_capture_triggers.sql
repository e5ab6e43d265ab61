-- pgcdc._drop_capture_triggers(tbl): remove every pgcdc capture trigger from a table.
-- Shared by _generate_capture (before re-creating them) and detach.
create or replace function pgcdc._drop_capture_triggers(tbl regclass)
returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $fn$
declare
    t text;
begin
    foreach t in array array['pgcdc_capture_ins', 'pgcdc_capture_upd', 'pgcdc_capture_pk',
                             'pgcdc_capture_del', 'pgcdc_capture_trunc'] loop
        execute format('drop trigger if exists %I on %s', t, tbl);
    end loop;
end
$fn$;
