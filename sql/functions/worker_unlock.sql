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
