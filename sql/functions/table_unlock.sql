-- pgcdc.table_unlock(consumer, table_ids): end this session's leases of the tables.
-- Touches: pgcdc.table_lease.
create or replace function pgcdc.table_unlock(p_name text, p_ids int[])
returns void
language sql
set search_path = pg_catalog, pg_temp
as $$
    delete from pgcdc.table_lease where consumer = p_name and pid = pg_backend_pid() and table_id = any(p_ids)
$$;
