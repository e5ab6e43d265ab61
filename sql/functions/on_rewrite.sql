-- pgcdc._on_rewrite(): event trigger function (table_rewrite; installed where the installing
-- role may create event triggers). ALTER TABLE that rewrites an attached table (a column
-- retyped, even to its own type with USING; a column added with a volatile default) changes
-- values without firing the capture triggers: queue a T event, in the DDL's own transaction,
-- so every consumer copies the table again. Except a rewrite that only widens column types
-- (pgcdc._widens: int -> bigint, ...) by one ALTER TABLE statement without USING: the values
-- stay what they were, and each consumer widens its Delta table's columns in place
-- (pgcdc/lake/evolve.py). Touches: pgcdc.commit_queue.
create or replace function pgcdc._on_rewrite()
returns event_trigger
language plpgsql
security definer  -- the table's owner runs the DDL; it needs no rights on pgcdc
set search_path = pg_catalog, pg_temp
as $fn$
declare
    v_oid oid := pg_event_trigger_table_rewrite_oid();
    a pgcdc.attached;
begin
    -- (a partition's rewrite: its root's table; an ALTER TABLE of the root rewrites each partition)
    for a in select * from pgcdc.attached t where t.relid = v_oid or v_oid = any(t.members) loop
        if not (a.relid = v_oid and pgcdc._widened_only(a, pg_event_trigger_table_rewrite_reason(), current_query())) then
            perform pgcdc._queue_copy(a.table_id);
        end if;
    end loop;
end
$fn$;

do $et$
begin
    if not exists (select 1 from pg_event_trigger where evtname = 'pgcdc_rewrite') then
        create event trigger pgcdc_rewrite on table_rewrite execute function pgcdc._on_rewrite();
    end if;
exception when insufficient_privilege then
    null;
end
$et$;
