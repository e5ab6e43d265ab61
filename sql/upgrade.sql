-- Upgrade steps that need the functions above; run last by install, before it regenerates the
-- capture code of every attached table.
drop function if exists pgcdc._capture_failed(int, text);   -- (schema v4: capture now inserts its T event itself)
drop function if exists pgcdc._consumer_lock_space();        -- (schema v4: advisory locks anyone could take)

-- schema v5 granted readers pgcdc._slot(xid8), which only the event triggers call (as the installer)
do $slot$
declare
    r regrole;
begin
    for r in select to_regrole(g.role_name) from pgcdc.grantee g
              where g.kind = 'reader' and to_regrole(g.role_name) is not null loop
        execute format('revoke execute on function pgcdc._slot(xid8) from %s', r);
    end loop;
end
$slot$;

-- schema v7 added pgcdc.attached_schema (`pgcdc status`), v10 pgcdc.shard_gone (fan-ins' departed
-- sources, which runs read): readers read them, as pgcdc.grant grants; admins keep all rights
do $schemas$
declare
    g record;
begin
    for g in select to_regrole(role_name) as r, kind from pgcdc.grantee where to_regrole(role_name) is not null loop
        execute format(case g.kind when 'reader' then 'grant select on pgcdc.attached_schema, pgcdc.shard_gone to %s'
                                   else 'grant all on pgcdc.attached_schema, pgcdc.shard_gone to %s' end, g.r);
    end loop;
end
$schemas$;

-- schema v8 added workers (pgcdc.consumer_worker, pgcdc.table_lease and their functions): readers
-- are granted them as pgcdc.grant does; admins keep all rights
do $workers$
declare
    g record;
begin
    for g in select to_regrole(role_name) as r, kind from pgcdc.grantee where to_regrole(role_name) is not null loop
        if g.kind = 'reader' then
            execute format('grant select, insert, update, delete on pgcdc.consumer_worker, pgcdc.table_lease to %s', g.r);
            execute format('grant execute on function pgcdc.worker_lock(text, text), pgcdc.worker_unlock(text), '
                           'pgcdc.table_lock(text, int[]), pgcdc.table_unlock(text, int[]), '
                           'pgcdc._worker_alive(text, int), pgcdc._workers(text), pgcdc._take_key() to %s', g.r);
        else
            execute format('grant all on pgcdc.consumer_worker, pgcdc.table_lease to %s', g.r);
            execute format('grant execute on all functions in schema pgcdc to %s', g.r);
        end if;
    end loop;
end
$workers$;

update pgcdc.attached a set table_name = a.relid::text
 where a.table_name is null and exists (select 1 from pg_class c where c.oid = a.relid);

-- attached tables dropped where no event trigger saw it: release them before regenerating
select pgcdc._forget_dropped();

-- predicates attached before schema v5: checked and stored in canonical form; one that no longer
-- passes (it calls a non-built-in or non-immutable function) is kept, with a warning: capture
-- evaluates it with pgcdc_capture's rights alone, and attaching the table again replaces it
do $predicates$
declare
    a record;
    c record;
begin
    for a in select * from pgcdc.attached t where t.predicate is not null and t.predicate_columns is null loop
        begin
            select * into strict c from pgcdc._check_predicate(a.relid, a.predicate);
            update pgcdc.attached set predicate = c.normalized, predicate_columns = c.columns
             where table_id = a.table_id;
        exception when others then
            update pgcdc.attached t set predicate_columns = (select array_agg(x.attname::text order by x.attnum)
                                                               from pg_attribute x
                                                              where x.attrelid = a.relid and x.attnum > 0
                                                                and not x.attisdropped)
             where t.table_id = a.table_id;
            raise warning 'pgcdc: the predicate of % no longer passes attach''s checks: %', a.relid, sqlerrm
                using hint = format('attach it again with a predicate of built-in immutable functions: pgcdc attach %s --where ...', a.relid);
        end;
    end loop;
end
$predicates$;

-- schema v12 added column choices (sql/functions/kept.sql, choose_columns.sql): readers call pgcdc._kept and
-- pgcdc.kept_columns to learn the columns a table's sync reads; v14 pgcdc._columns_are, which every
-- read of an attached table's rows calls; v17 pgcdc.follow_new, which each run calls; as pgcdc.grant grants
do $columns$
declare
    r regrole;
begin
    for r in select to_regrole(g.role_name) from pgcdc.grantee g
              where g.kind = 'reader' and to_regrole(g.role_name) is not null loop
        execute format('grant execute on function pgcdc._kept(text, int2[], text[], int2[], int2, name), '
                       'pgcdc.kept_columns(regclass), pgcdc._kept_names(regclass, text, int2[], text[], int2[]), '
                       'pgcdc._columns_are(int, text[]), pgcdc.follow_new(oid[]) to %s', r);
    end loop;
end
$columns$;

