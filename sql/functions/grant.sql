-- pgcdc.grant(role, kind): grant a role what pgcdc's `reader` (ingest, status, verify, on the
-- primary and through replication on a standby) or `admin` (also attach, detach, install
-- upkeep, consumers, retention) needs, and nothing more; docs/security.md lists it. A reader
-- may read the attached tables (attach grants it each table attached later; a table attached with a
-- column choice, only its kept columns: pgcdc._read_grants) and the queue, and
-- write consumer states and runs and its workers' leases; it gets no TRUNCATE, no DDL.
-- Returns the statements it ran. Run it as the installer (or a superuser).
-- Touches: privileges of `role`, pgcdc.grantee.
create or replace function pgcdc.grant(p_role regrole, kind text)
returns setof text
language plpgsql
set search_path = pg_catalog, pg_temp
as $fn$
declare
    stmt text;
    stmts text[];
begin
    if kind is null or kind not in ('reader', 'admin') then
        raise exception using errcode = '22023', message = format('unknown pgcdc role kind %L', kind),
            hint = 'use reader or admin';
    end if;
    if p_role::text in ('public', 'pgcdc_capture') then
        raise exception using errcode = '22023', message = format('pgcdc will not grant its rights to %s', p_role),
            hint = 'name a role of its own (CREATE ROLE pgcdc_reader LOGIN PASSWORD ...)';
    end if;
    stmts := array[
        format('grant usage on schema pgcdc to %s', p_role),
        format('grant select on pgcdc.meta, pgcdc.attached, pgcdc.commit_queue, pgcdc.consumer, pgcdc.consumer_state, '
               'pgcdc.consumer_run, pgcdc.forgotten, pgcdc.attached_schema, pgcdc.shard_gone to %s', p_role),
        format('grant insert, update on pgcdc.consumer, pgcdc.consumer_state, pgcdc.consumer_run to %s', p_role),
        format('grant select, insert, update, delete on pgcdc.consumer_worker, pgcdc.table_lease to %s', p_role),
        format('grant execute on function pgcdc.maintain(interval), pgcdc.stats(), pgcdc.retention_horizon(), '
               'pgcdc._unfit(text, text, text, text, text), pgcdc.consumer_lock(text), pgcdc.consumer_holder(text), '
               'pgcdc._lock_held(int, int), pgcdc._lock_space(), pgcdc._take_key(), pgcdc._forget_dropped(), '
               'pgcdc.worker_lock(text, text), pgcdc.worker_unlock(text), pgcdc.table_lock(text, int[]), '
               'pgcdc.table_unlock(text, int[]), pgcdc._worker_alive(text, int), pgcdc._workers(text), '
               'pgcdc._kept(text, int2[], text[], int2[], int2, name), pgcdc.kept_columns(regclass), '
               'pgcdc._columns_are(int, text[]), pgcdc.follow_new(oid[]), '
               'pgcdc._kept_names(regclass, text, int2[], text[], int2[]) to %s',
               p_role)];
    stmts := stmts || array(select distinct format('grant usage on schema %I to %s', n.nspname, p_role)
                              from pgcdc.attached a join pg_class c on c.oid = a.relid
                              join pg_namespace n on n.oid = c.relnamespace)
                   || array(select g from pgcdc.attached a cross join lateral unnest(pgcdc._read_grants(a.relid, p_role)) g
                             where exists (select 1 from pg_class c where c.oid = a.relid) order by a.table_id);
    if kind = 'admin' then
        stmts := stmts || array[
            format('grant usage, create on schema pgcdc to %s with grant option', p_role),
            format('grant all on all tables in schema pgcdc to %s', p_role),
            format('grant execute on all functions in schema pgcdc to %s', p_role),
            format('grant pgcdc_capture to %s', p_role)];
    end if;
    foreach stmt in array stmts loop
        execute stmt;
        return next stmt;
    end loop;
    insert into pgcdc.grantee (role_name, kind) values (p_role::text, kind)
    on conflict (role_name) do update set kind = excluded.kind;
end
$fn$;
