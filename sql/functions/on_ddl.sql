-- pgcdc._on_ddl(): event trigger function (ddl_command_end of ALTER TABLE and CREATE TABLE;
-- installed where the installing role may create event triggers). After DDL on an attached
-- table that changed its partition tree, capture follows the tree and the keys of the rows
-- that came or went are queued (below). After DDL on an
-- attached table that changed its columns,
-- in the DDL's own transaction: follow renamed key columns (by number), regenerate the capture
-- code, and with --exclude-columns let the readers read a column added. Consumers bring their
-- Delta tables to the new columns themselves (in place where they can, pgcdc/lake/evolve.py):
-- a read that the change overtook fails (pgcdc._columns_are), so no rows of the new shape land
-- under the old one. A change that rewrote the table is queued as a T event (_on_rewrite). If the key or the predicate no longer exists, capture stops (its triggers are
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
    v_new oid[];
    v_leaf regclass;
    v_line text;
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
            perform pgcdc._drop_capture_triggers(a.relid, a.table_id);
            raise warning 'pgcdc: a key column of %s was dropped: its changes are no longer captured', a.relid
                using hint = format('run `pgcdc attach %s` with its new key, then `pgcdc resync %s`', a.relid, a.relid);
            continue;
        end if;
        update pgcdc.attached set key_columns = v_cols, key_types = v_types, shape = pgcdc._shape(relid),
                                  types = pgcdc._types(relid)
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
            perform pgcdc._drop_capture_triggers(a.relid, a.table_id);
            raise warning 'pgcdc: capture of % stopped: %', a.relid, sqlerrm
                using hint = format('run `pgcdc attach %s` with a valid --where, then `pgcdc resync %s`', a.relid, a.relid);
            continue;
        end;
        if a.column_mode = 'except' then
            begin  -- a column added is kept: the readers may read it (column grants name each column)
                perform pgcdc._grant_readers(a.table_id);
            exception when insufficient_privilege then
                raise warning 'pgcdc: could not let pgcdc''s readers read the new columns of %: %', a.relid, sqlerrm
                    using hint = 'run `pgcdc grant ROLE --reader` again as the role that installed pgcdc';
            end;
        end if;
    end loop;
    -- a partitioned table's tree changed (a partition created, attached or detached, at any
    -- depth): capture follows it in this transaction; the rows an attached partition brought
    -- in, or a detached one took away, are queued by key, leaf by leaf (_queue_keys: bounded to
    -- them, not a copy of the whole table); a partition just created holds none
    for a in select distinct on (t.table_id) t.*
               from pg_event_trigger_ddl_commands() c
              cross join lateral pg_partition_ancestors(c.objid) p(relid)
               join pgcdc.attached t on t.relid = p.relid
              where c.classid = 'pg_class'::regclass and t.members is not null
                and t.members is distinct from pgcdc._members(t.relid)
    loop
        perform pgcdc._generate_capture(a.table_id);
        if tg_tag = 'ALTER TABLE' then
            v_new := (select t.members from pgcdc.attached t where t.table_id = a.table_id);
            for v_leaf in select m::regclass from unnest(v_new) m where not m = any(a.members)
                          union
                          select m::regclass from unnest(a.members) m where not m = any(v_new)
            loop
                if (select c.relkind from pg_class c where c.oid = v_leaf) is distinct from 'p' then
                    perform pgcdc._queue_keys(a.table_id, v_leaf);  -- (a partitioned one: its leaves are listed)
                end if;
            end loop;
        end if;
    end loop;
    -- a table created (or given a primary key, or detached from a partitioned table) in a schema
    -- attached whole with --follow-new: attached now (pgcdc.follow_new never fails the DDL)
    for v_line in select pgcdc.follow_new(array(select c.objid from pg_event_trigger_ddl_commands() c
                                                 where c.classid = 'pg_class'::regclass)) loop
        if v_line like 'refused %' then
            raise warning 'pgcdc: % (its schema is followed: it is attached once it can be)', substr(v_line, 9);
        end if;
    end loop;
end
$fn$;

-- The event trigger itself: a superuser (or a managed service's admin role) may create one;
-- a role that may not goes on without it (`pgcdc status` says so).
do $et$
begin
    if not exists (select 1 from pg_event_trigger where evtname = 'pgcdc_ddl' and 'CREATE TABLE' = any(evttags)) then
        drop event trigger if exists pgcdc_ddl;  -- (schema v8's fired on ALTER TABLE alone)
        create event trigger pgcdc_ddl on ddl_command_end when tag in ('ALTER TABLE', 'CREATE TABLE')
            execute function pgcdc._on_ddl();
    end if;
exception when insufficient_privilege then
    null;
end
$et$;
