-- pgcdc.retention_horizon(): the txid below which no consumer needs queue events any more:
-- the lowest watermark over every consumer's attached tables (for a table marked for a resync,
-- where its pending copy registered, if it did: copy_from). A table no consumer has
-- registered yet pins nothing: a consumer registers it (pgcdc/source/mirror.py register_table)
-- before the snapshot its first copy reads. Without any consumer it is the snapshot's
-- xmin (events of ended transactions only). Null when a watermark lies beyond the next
-- txid, which no real watermark can: the state came from another cluster (a restore) and
-- means nothing here.
-- Reads pgcdc.attached and pgcdc.consumer_state.
create or replace function pgcdc.retention_horizon()
returns xid8
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
    select case when max(s.watermark) > pg_snapshot_xmax(pg_current_snapshot()) then null
                else least(min(case when s.resync_reason is null then s.watermark else s.copy_from end),
                           pg_snapshot_xmin(pg_current_snapshot())) end
      from pgcdc.consumer_state s join pgcdc.attached a using (table_id)
$$;
