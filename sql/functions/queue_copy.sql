-- pgcdc._queue_copy(table_id): queue a T event for an attached table in the current transaction:
-- every consumer copies the table again (its rows changed where no capture trigger saw them: DDL
-- that rewrote it, a partition attached with rows, detached or dropped). Called by the event
-- triggers (as the installer) and attach. Touches: pgcdc.commit_queue.
create or replace function pgcdc._queue_copy(p_table_id int)
returns void
language sql
set search_path = pg_catalog, pg_temp
as $$
    insert into pgcdc.commit_queue (txid, slot, table_id, op, shard, keys)
    select pg_current_xact_id(), pgcdc._slot(pg_current_xact_id()), a.table_id, 'T', a.shard, null
      from pgcdc.attached a where a.table_id = p_table_id
$$;
