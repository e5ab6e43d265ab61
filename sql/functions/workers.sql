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
