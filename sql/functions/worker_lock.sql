-- Workers that share a consumer (docs/operations.md "Workers"): every `pgcdc ingest` process of
-- a consumer joins it as a worker (pgcdc.worker_lock) and leases each table before it applies
-- it (pgcdc.table_lock), so each table is applied by one worker at a time while the others go on
-- with the rest. A worker is a row of pgcdc.consumer_worker naming its backend and a random
-- advisory key that backend holds (the consumer lease's scheme, consumer_lock.sql): a worker
-- that dies frees its tables with its key. A consumer's whole lease (pgcdc.consumer_lock: a
-- restore's reset-watermark, dropping it) excludes its workers and they exclude it; both take
-- the pgcdc.consumer row's lock first, so they are decided one after the other.

-- pgcdc.worker_lock(consumer, worker): join the consumer as a worker named `worker` (host and
-- process, for status) for the life of this session (autocommit); false while a backend holds
-- the consumer's whole lease. Touches: pgcdc.consumer, pgcdc.consumer_worker.
create or replace function pgcdc.worker_lock(p_name text, p_worker text)
returns boolean
language plpgsql
set search_path = pg_catalog, pg_temp
as $fn$
declare
    v_key int;
begin
    insert into pgcdc.consumer (name) values (p_name) on conflict (name) do nothing;
    perform 1 from pgcdc.consumer c where c.name = p_name for update;
    if exists (select 1 from pgcdc.consumer c where c.name = p_name and c.lock_pid <> pg_backend_pid()
                                                 and pgcdc._lock_held(c.lock_key, c.lock_pid)) then
        return false;
    end if;
    delete from pgcdc.consumer_worker w
     where w.consumer = p_name and w.pid <> pg_backend_pid() and not pgcdc._lock_held(w.lock_key, w.pid);
    delete from pgcdc.table_lease l
     where l.consumer = p_name and not exists (select 1 from pgcdc.consumer_worker w
                                                where w.consumer = l.consumer and w.pid = l.pid);
    if pgcdc._worker_alive(p_name, pg_backend_pid()) then
        update pgcdc.consumer_worker set worker = p_worker where consumer = p_name and pid = pg_backend_pid();
        return true;
    end if;
    v_key := pgcdc._take_key();
    if v_key is null then
        return false;
    end if;
    insert into pgcdc.consumer_worker (consumer, pid, lock_key, worker) values (p_name, pg_backend_pid(), v_key, p_worker)
    on conflict (consumer, pid) do update set lock_key = excluded.lock_key, worker = excluded.worker, since = now();
    return true;
end
$fn$;
