-- Runs of one consumer exclude each other through a lease on its pgcdc.consumer row: the id of
-- the holding backend (lock_pid) and a random advisory lock key (lock_key) that backend holds
-- for its whole run. The lease is alive while that backend holds that key (pg_locks). Advisory
-- lock keys are database-wide and any login role may take any key: a key chosen at random
-- and taken before the lease commits cannot be taken first, and a role that takes it after the
-- holder ended is not the backend the lease names. Only roles that may update pgcdc.consumer
-- (pgcdc's own) can take a lease. (docs/security.md)

-- pgcdc._lock_space(): the first key of every consumer's advisory lock.
create or replace function pgcdc._lock_space()
returns int
language sql
immutable
set search_path = pg_catalog, pg_temp
as $$ select 1885563747 $$;  -- 'pgcc'

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

-- pgcdc._take_key(): a random key of pgcdc's advisory lock space, now held by this session
-- (null if five draws were all held by other sessions): taken before the lease naming it commits.
create or replace function pgcdc._take_key()
returns int
language plpgsql
set search_path = pg_catalog, pg_temp
as $fn$
declare
    v_key int;
begin
    for attempt in 1 .. 5 loop
        v_key := 1 + floor(random() * 2147483646)::int;
        if pg_try_advisory_lock(pgcdc._lock_space(), v_key) then
            return v_key;
        end if;  -- (some other session holds that random key: draw another)
    end loop;
    return null;
end
$fn$;

-- pgcdc.consumer_lock(name): take the consumer's lease for this session (registering the name on
-- first use); false if another backend holds it. Call it in autocommit: the lease is seen by
-- others once the statement commits, by which time this session holds its key.
-- Touches: pgcdc.consumer.
create or replace function pgcdc.consumer_lock(p_name text)
returns boolean
language plpgsql
set search_path = pg_catalog, pg_temp
as $fn$
declare
    v_key int;
begin
    insert into pgcdc.consumer (name) values (p_name) on conflict (name) do nothing;
    perform 1 from pgcdc.consumer c where c.name = p_name for update;  -- (decided after a worker_lock in flight)
    if exists (select 1 from pgcdc.consumer_worker w where w.consumer = p_name and w.pid <> pg_backend_pid()
                                                      and pgcdc._lock_held(w.lock_key, w.pid)) then
        return false;  -- workers share it (worker_lock.sql)
    end if;
    v_key := pgcdc._take_key();
    if v_key is null then
        return false;
    end if;
    update pgcdc.consumer c set lock_key = v_key, lock_pid = pg_backend_pid()
     where c.name = p_name and (c.lock_pid = pg_backend_pid() or not pgcdc._lock_held(c.lock_key, c.lock_pid));
    if not found then
        perform pg_advisory_unlock(pgcdc._lock_space(), v_key);
        return false;  -- another backend holds it
    end if;
    return true;
end
$fn$;

-- pgcdc._workers(consumer): the consumer's live workers (sql/functions/worker_lock.sql), for
-- status and errors: "name (pid N)", in the order they joined.
create or replace function pgcdc._workers(p_name text)
returns text[]
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
    select coalesce(array_agg(format('%s (pid %s)', w.worker, w.pid) order by w.since, w.pid), '{}')
      from pgcdc.consumer_worker w
     where w.consumer = p_name and pgcdc._lock_held(w.lock_key, w.pid)
$$;

-- pgcdc.consumer_holder(name): the backend holding the consumer's lease (pid, role,
-- application_name), or its live workers (worker_lock.sql), or null if none is running. Used by
-- status and to name a busy consumer.
create or replace function pgcdc.consumer_holder(p_name text)
returns text
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
    select coalesce(
        (select format('pid %s (role %s, application_name %s)', c.lock_pid,
                       coalesce((select a.usename::text from pg_stat_activity a where a.pid = c.lock_pid), '?'),
                       coalesce((select nullif(a.application_name, '') from pg_stat_activity a
                                  where a.pid = c.lock_pid), '?'))
           from pgcdc.consumer c
          where c.name = p_name and pgcdc._lock_held(c.lock_key, c.lock_pid)),
        (select format('worker(s) %s', array_to_string(w, ', ')) from pgcdc._workers(p_name) w
          where cardinality(w) > 0))
$$;
