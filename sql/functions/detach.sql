-- pgcdc.detach(tbl, keep_rows): stop capturing a table. Returns false if it was not attached.
-- Touches: the table's pgcdc triggers, its capture function, its pgcdc.attached row and
-- its consumer_state rows (pgcdc._forget). Events already queued for it are ignored from now on.
-- A fan-in source's rows leave the fan-in's Delta tables at each consumer's next run, unless
-- keep_rows (pgcdc.shard_gone).
drop function if exists pgcdc.detach(regclass);  -- (schema v9's, without keep_rows)
create or replace function pgcdc.detach(tbl regclass, keep_rows boolean default false)
returns boolean
language plpgsql
set search_path = pg_catalog, pg_temp
as $fn$
declare
    a pgcdc.attached;
begin
    perform pgcdc._forget_dropped();
    select * into a from pgcdc.attached t where t.relid = tbl;
    if a.table_id is null then
        return false;
    end if;
    perform pgcdc._forget(a.table_id, null);
    update pgcdc.shard_gone g set keep_rows = detach.keep_rows
     where g.into_table = a.into_table and g.shard = a.shard;
    return true;
end
$fn$;
