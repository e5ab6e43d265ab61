-- pgcdc.stats(): capture-side health per attached table: queued events and keys, and what is
-- still pending for its slowest consumer (everything, if no consumer has synced it yet).
-- Reads pgcdc.attached, pgcdc.commit_queue and pgcdc.consumer_state.
create or replace function pgcdc.stats()
returns table (
    table_name     text,
    table_id       int,
    key_columns    text[],
    predicate      text,
    shard          int,
    consumers      int,
    min_watermark  xid8,
    events         bigint,
    pending_events bigint,
    pending_keys   bigint,
    oldest_pending timestamptz
)
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
    select a.relid::text, a.table_id, a.key_columns, a.predicate, a.shard,
           cs.consumers, cs.min_watermark,
           coalesce(q.events, 0), coalesce(q.pending_events, 0), coalesce(q.pending_keys, 0), q.oldest_pending
      from pgcdc.attached a
      left join lateral (select count(*)::int as consumers, min(s.watermark) as min_watermark
                           from pgcdc.consumer_state s where s.table_id = a.table_id) cs on true
      left join lateral (
            select count(*) as events,
                   count(*) filter (where cs.min_watermark is null or e.txid >= cs.min_watermark) as pending_events,
                   sum(coalesce(cardinality(e.keys), 0))
                       filter (where cs.min_watermark is null or e.txid >= cs.min_watermark) as pending_keys,
                   min(e.at) filter (where cs.min_watermark is null or e.txid >= cs.min_watermark) as oldest_pending
              from pgcdc.commit_queue e where e.table_id = a.table_id) q on true
     order by a.relid::text
$$;
