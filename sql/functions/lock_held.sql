-- pgcdc._lock_held(key, pid): whether backend `pid` holds the consumer lock `key` now.
create or replace function pgcdc._lock_held(p_key int, p_pid int)
returns boolean
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
    select p_key is not null and p_pid is not null and exists (
        select 1 from pg_locks l
         where l.locktype = 'advisory' and l.database = (select oid from pg_database where datname = current_database())
           and l.classid = pgcdc._lock_space()::oid and l.objid = p_key::oid and l.objsubid = 2
           and l.pid = p_pid and l.granted and l.mode = 'ExclusiveLock')
$$;
