-- pgcdc._on_ddl(): event trigger function (ddl_command_end; installed where the installing
-- role may create event triggers). After DDL on an attached table that changed its columns,
-- in the DDL's own transaction: follow renamed key columns (by number), regenerate the capture
-- code, and queue a T event so every consumer copies the table again (its Delta copy has the
-- old columns). If the key or the predicate no longer exists, capture stops (its triggers are
-- dropped; `pgcdc status` says so) rather than fail the application's statements.
-- Touches: pgcdc.attached, capture functions and triggers, pgcdc.commit_queue.
create or replace function pgcdc._on_ddl()
returns event_trigger
language plpgsql
security definer  -- the table's owner runs the DDL; it needs no rights on pgcdc
set search_path = pg_catalog, pg_temp
as $fn$
declare
    a pgcdc.attached;
    v_cols text[];
    v_types text[];
begin
    -- (a rename: the name a dropped table is reported by)
    update pgcdc.attached t set table_name = t.relid::text
     where t.relid in (select c.objid from pg_event_trigger_ddl_commands() c where c.classid = 'pg_class'::regclass)
       and t.table_name is distinct from t.relid::text;
    for a in select * from pgcdc.attached t
              where t.relid in (select c.objid from pg_event_trigger_ddl_commands() c
                                 where c.classid = 'pg_class'::regclass)
                and t.shape is distinct from pgcdc._shape(t.relid)
    loop
        select array_agg(t.attname::text order by u.o), array_agg(format_type(t.atttypid, t.atttypmod) order by u.o)
          into v_cols, v_types
          from unnest(a.key_attnums) with ordinality u(n, o)
          join pg_attribute t on t.attrelid = a.relid and t.attnum = u.n and not t.attisdropped;
        if coalesce(cardinality(v_cols), 0) <> cardinality(a.key_attnums) then
            perform pgcdc._drop_capture_triggers(a.relid);
            raise warning 'pgcdc: a key column of %s was dropped: its changes are no longer captured', a.relid
                using hint = format('run `pgcdc attach %s` with its new key, then `pgcdc resync %s`', a.relid, a.relid);
            continue;
        end if;
        update pgcdc.attached set key_columns = v_cols, key_types = v_types, shape = pgcdc._shape(relid)
         where table_id = a.table_id;
        begin
            if exists (select 1 from unnest(a.predicate_columns) c
                        where not exists (select 1 from pg_attribute t where t.attrelid = a.relid
                                             and t.attname = c and not t.attisdropped)) then
                -- the predicate names a column that is gone (or renamed)
                raise exception 'its predicate (%) names a column that no longer exists', a.predicate;
            end if;
            perform pgcdc._generate_capture(a.table_id);
        exception when others then
            perform pgcdc._drop_capture_triggers(a.relid);
            raise warning 'pgcdc: capture of % stopped: %', a.relid, sqlerrm
                using hint = format('run `pgcdc attach %s` with a valid --where, then `pgcdc resync %s`', a.relid, a.relid);
            continue;
        end;
        insert into pgcdc.commit_queue (txid, slot, table_id, op, shard, keys)
        values (pg_current_xact_id(), pgcdc._slot(pg_current_xact_id()), a.table_id, 'T', a.shard, null);
    end loop;
end
$fn$;

-- The event trigger itself: a superuser (or a managed service's admin role) may create one;
-- a role that may not goes on without it (`pgcdc status` says so).
do $et$
begin
    if not exists (select 1 from pg_event_trigger where evtname = 'pgcdc_ddl') then
        create event trigger pgcdc_ddl on ddl_command_end when tag in ('ALTER TABLE')
            execute function pgcdc._on_ddl();
    end if;
exception when insufficient_privilege then
    null;
end
$et$;
