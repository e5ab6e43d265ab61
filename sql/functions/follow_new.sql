-- pgcdc.follow_new(tables): attach each table of a schema attached whole with --follow-new that
-- is not attached yet (of `tables` alone, if given: the tables a DDL statement touched), as
-- `attach --schema` would (its excluded columns left out), each in a subtransaction: a table
-- pgcdc cannot capture (no primary key yet, a key type it refuses) is returned with the reason
-- and tried again at the next DDL on it or the next run, never failing the caller. Called by
-- the DDL event trigger (a table created, or a partition detached, lands in the same
-- transaction) and by each run (without the event trigger). SECURITY DEFINER: a run's reader
-- role may not attach; it attaches only in the schemas an admin chose to follow.
-- Returns 'attached <table>' or 'refused <table>: <why>' lines. Touches: pgcdc.attached, capture.
create or replace function pgcdc.follow_new(p_tables oid[] default null)
returns setof text
language plpgsql
security definer
set search_path = pg_catalog, pg_temp
as $fn$
declare
    r record;
begin
    for r in select c.oid, format('%I.%I', n.nspname, c.relname) as name
               from pgcdc.attached_schema s
               join pg_namespace n on n.oid = s.schema_oid
               join pg_class c on c.relnamespace = s.schema_oid
              where s.follow and c.relkind in ('r', 'p') and not c.relispartition
                and (p_tables is null or c.oid = any(p_tables))
                and not exists (select 1 from pgcdc.attached a where a.relid = c.oid)
              order by 2
    loop
        begin
            perform pgcdc.attach(r.oid::regclass);
            return next format('attached %s', r.name);
        exception when others then
            return next format('refused %s: %s', r.name, sqlerrm);
        end;
    end loop;
end
$fn$;
