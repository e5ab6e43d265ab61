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
