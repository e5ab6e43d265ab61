-- pgcdc._on_drop(): event trigger function (sql_drop; installed where the installing role may
-- create event triggers). DROP TABLE of an attached table (or DROP SCHEMA ... CASCADE) detaches
-- it in the DROP's own transaction: its capture function and consumer states go, so the queue
-- no longer keeps its events; pgcdc.forgotten records it, and `pgcdc status` names it (with
-- its Delta tables) until `pgcdc detach NAME` acknowledges it. DROP of a partition of an
-- attached partitioned table: capture follows the tree and consumers replace that partition's
-- rows alone (pgcdc._queue_partition).
-- Touches: pgcdc.attached, pgcdc.consumer_state, pgcdc.forgotten, capture functions.
create or replace function pgcdc._on_drop()
returns event_trigger
language plpgsql
security definer  -- the table's owner runs the DROP; it needs no rights on pgcdc
set search_path = pg_catalog, pg_temp
as $fn$
declare
    r record;
    v_part text;
begin
    for r in select a.table_id, o.object_identity
               from pg_event_trigger_dropped_objects() o
               join pgcdc.attached a on a.relid = o.objid
              where o.classid = 'pg_class'::regclass and o.objsubid = 0
    loop
        perform pgcdc._forget(r.table_id, 'dropped', r.object_identity);
        raise warning 'pgcdc: % was attached; it is detached now (its Delta tables stay as they are)', r.object_identity
            using hint = format('`pgcdc detach %s` acknowledges it in `pgcdc status`', r.object_identity);
    end loop;
    -- a partition of an attached table dropped: its rows left the table without row events;
    -- capture follows the tree, and each dropped partition (not one dropped with its parent)
    -- queues a T event carrying its bound as capture knew it (pgcdc.attached.bounds), so
    -- consumers remove its rows alone; one capture had no bound for, a copy of the table
    for r in select a.table_id, a.bounds, a.members, array(select o.objid::text from pg_event_trigger_dropped_objects() o
                                                             where o.classid = 'pg_class'::regclass and o.objsubid = 0) as gone
               from pgcdc.attached a
              where a.members && array(select o.objid from pg_event_trigger_dropped_objects() o
                                        where o.classid = 'pg_class'::regclass and o.objsubid = 0)
                and exists (select 1 from pg_class c where c.oid = a.relid)
    loop
        perform pgcdc._generate_capture(r.table_id);
        for v_part in select g from unnest(r.gone) g where g::oid = any(r.members) loop
            if not coalesce(r.bounds ? v_part, false) then
                perform pgcdc._queue_copy(r.table_id);
            elsif not coalesce(r.bounds -> v_part ->> 'parent' = any(r.gone), false) then
                perform pgcdc._queue_partition(r.table_id, r.bounds -> v_part);
            end if;
        end loop;
    end loop;
end
$fn$;

do $et$
begin
    if not exists (select 1 from pg_event_trigger where evtname = 'pgcdc_drop') then
        create event trigger pgcdc_drop on sql_drop when tag in ('DROP TABLE', 'DROP SCHEMA', 'DROP OWNED')
            execute function pgcdc._on_drop();
    end if;
exception when insufficient_privilege then
    null;
end
$et$;
