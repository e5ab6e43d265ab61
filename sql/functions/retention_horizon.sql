-- pgcdc.retention_horizon(): the txid below which no consumer needs queue events any more:
-- the lowest watermark over every (attached table, consumer) pair. Null while some attached
-- table has no consumer state yet, so nothing is dropped before its first sync; null too
-- when a watermark lies beyond the next txid, which no real watermark can: the state came
-- from another cluster (a restore) and means nothing here.
-- Reads pgcdc.attached and pgcdc.consumer_state.
create or replace function pgcdc.retention_horizon()
returns xid8
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
    select case when bool_or(w is null) or max(w) > pg_snapshot_xmax(pg_current_snapshot()) then null
                else min(w) end
      from (select (select min(s.watermark) from pgcdc.consumer_state s where s.table_id = a.table_id) as w
              from pgcdc.attached a) per_table
$$;
