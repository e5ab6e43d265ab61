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
