-- pgcdc._drop_capture_triggers(tbl, table_id): remove every pgcdc capture trigger from a table
-- and, with the table_id of an attached table, from every table whose triggers call its capture
-- function: the members of a partitioned table's tree, and partitions detached from it where no
-- event trigger saw it. Shared by _generate_capture (before re-creating them), detach and the
-- DDL handling.
drop function if exists pgcdc._drop_capture_triggers(regclass);
drop function if exists pgcdc._drop_capture_triggers(regclass, regprocedure);
create or replace function pgcdc._drop_capture_triggers(tbl regclass, p_table_id int default null)
returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $fn$
declare
    t text;
    r regclass;
    fn regprocedure := case when p_table_id is not null
                            then to_regprocedure(format('pgcdc.%I()', 'capture_' || p_table_id)) end;
begin
    for r in select tbl where tbl is not null
             union select distinct g.tgrelid::regclass from pg_trigger g where g.tgfoid = fn
    loop
        foreach t in array array['pgcdc_capture_ins', 'pgcdc_capture_upd', 'pgcdc_capture_pk',
                                 'pgcdc_capture_del', 'pgcdc_capture_trunc', 'pgcdc_capture_row'] loop
            execute format('drop trigger if exists %I on %s', t, r);
        end loop;
    end loop;
end
$fn$;
