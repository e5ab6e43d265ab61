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
