-- pgcdc._queue_partition(table_id, bound): queue a T event for an attached partitioned table in
-- the current transaction, carrying the bound of one of its partitions (an object of
-- pgcdc._partition_bounds) whose rows changed where no capture trigger saw them (dropped): each
-- consumer replaces the rows of that bound alone (pgcdc/sync/partition_step.py). Without a
-- bound (a partition capture had none for), a copy of the whole table (_queue_copy).
-- Called by the event triggers (as the installer). Touches: pgcdc.commit_queue.
create or replace function pgcdc._queue_partition(p_table_id int, p_bound jsonb)
returns void
language sql
set search_path = pg_catalog, pg_temp
as $$
    insert into pgcdc.commit_queue (txid, slot, table_id, op, shard, keys, payload)
    select pg_current_xact_id(), pgcdc._slot(pg_current_xact_id()), a.table_id, 'T', a.shard, null, p_bound
      from pgcdc.attached a where a.table_id = p_table_id
$$;
