-- Runs of one consumer exclude each other through a lease on its pgcdc.consumer row: the id of
-- the holding backend (lock_pid) and a random advisory lock key (lock_key) that backend holds
-- for its whole run. The lease is alive while that backend holds that key (pg_locks). Advisory
-- lock keys are database-wide and any login role may take any key: a key chosen at random
-- and taken before the lease commits cannot be taken first, and a role that takes it after the
-- holder ended is not the backend the lease names. Only roles that may update pgcdc.consumer
-- (pgcdc's own) can take a lease. (docs/security.md)

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
