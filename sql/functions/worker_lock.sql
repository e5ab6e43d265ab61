-- Workers that share a consumer (docs/operations.md "Workers"): every `pgcdc ingest` process of
-- a consumer joins it as a worker (pgcdc.worker_lock) and leases each table before it applies
-- it (pgcdc.table_lock), so each table is applied by one worker at a time while the others go on
-- with the rest. A worker is a row of pgcdc.consumer_worker naming its backend and a random
-- advisory key that backend holds (the consumer lease's scheme, consumer_lock.sql): a worker
-- that dies frees its tables with its key. A consumer's whole lease (pgcdc.consumer_lock: a
-- restore's reset-watermark, dropping it) excludes its workers and they exclude it; both take
-- the pgcdc.consumer row's lock first, so they are decided one after the other.

-- pgcdc._worker_alive(consumer, pid): whether backend `pid` is a live worker of the consumer.
create or replace function pgcdc._worker_alive(p_name text, p_pid int)
returns boolean
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
    select exists (select 1 from pgcdc.consumer_worker w
                    where w.consumer = p_name and w.pid = p_pid and pgcdc._lock_held(w.lock_key, w.pid))
$$;

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

-- pgcdc.worker_unlock(consumer): leave the consumer (its table leases go too).
-- Touches: pgcdc.consumer_worker, pgcdc.table_lease.
create or replace function pgcdc.worker_unlock(p_name text)
returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $fn$
declare
    v_key int;
begin
    delete from pgcdc.table_lease where consumer = p_name and pid = pg_backend_pid();
    delete from pgcdc.consumer_worker where consumer = p_name and pid = pg_backend_pid() returning lock_key into v_key;
    if v_key is not null then
        perform pg_advisory_unlock(pgcdc._lock_space(), v_key);
    end if;
end
$fn$;

-- pgcdc.table_lock(consumer, table_ids): lease the tables to this session's worker of the
-- consumer; returns the ids it holds now (its own earlier leases too), not those another live
-- worker holds. Rows are taken in id order, so two workers leasing at once never deadlock.
-- Touches: pgcdc.table_lease.
create or replace function pgcdc.table_lock(p_name text, p_ids int[])
returns setof int
language plpgsql
set search_path = pg_catalog, pg_temp
as $fn$
begin
    if not pgcdc._worker_alive(p_name, pg_backend_pid()) then
        raise exception using errcode = '55000',
            message = format('this session is not a worker of consumer %s', p_name),
            hint = 'call pgcdc.worker_lock first';
    end if;
    return query
    insert into pgcdc.table_lease as l (consumer, table_id, pid)
    select p_name, id, pg_backend_pid() from (select distinct unnest(p_ids) as id) ids order by id
    on conflict (consumer, table_id) do update set pid = excluded.pid, since = now()
     where l.pid = pg_backend_pid() or not pgcdc._worker_alive(l.consumer, l.pid)
    returning l.table_id;
end
$fn$;

-- pgcdc.table_unlock(consumer, table_ids): end this session's leases of the tables.
-- Touches: pgcdc.table_lease.
create or replace function pgcdc.table_unlock(p_name text, p_ids int[])
returns void
language sql
set search_path = pg_catalog, pg_temp
as $$
    delete from pgcdc.table_lease where consumer = p_name and pid = pg_backend_pid() and table_id = any(p_ids)
$$;
