-- pgcdc._mark_lagging(): enforce the retention limit (pgcdc.meta retention_max_age, an
-- interval, and retention_max_bytes, a size; either may be absent). A consumer's table whose
-- oldest pending event is older than max_age, or, while the queue is larger than max_bytes,
-- the tables holding the lowest watermark, are marked for a resync: resync_reason says why,
-- the queue stops keeping what it missed (pgcdc.retention_horizon), and its next ingest copies
-- the table again. A consumer whose ingest is running (its lease is held, pgcdc.consumer_lock,
-- or a worker of it is alive, pgcdc.worker_lock) is never marked. Returns the marked (consumer, table, reason).
-- Only events the consumer has not applied count: one applied out of order (above a watermark a
-- long transaction holds back) is not pending. Called by pgcdc.maintain. Touches pgcdc.consumer_state.
create or replace function pgcdc._mark_lagging()
returns table (consumer text, table_name text, reason text)
language plpgsql
set search_path = pg_catalog, pg_temp
as $fn$
declare
    max_age interval := (select value::interval from pgcdc.meta where key = 'retention_max_age');
    max_bytes bigint := (select pg_size_bytes(value) from pgcdc.meta where key = 'retention_max_bytes');
    queue_bytes bigint;
    r record;
    running boolean;
begin
    if max_bytes is not null then
        select coalesce(sum(pg_total_relation_size(inhrelid)), 0) into queue_bytes
          from pg_inherits where inhparent = 'pgcdc.commit_queue'::regclass;
    end if;
    for r in
        select s.consumer, s.table_id, s.watermark, a.relid, c.consumer_id, p.oldest,
               s.watermark = min(s.watermark) over () as lowest
          from pgcdc.consumer_state s
          join pgcdc.attached a using (table_id)
          join pgcdc.consumer c on c.name = s.consumer
          left join lateral (select q.at as oldest from pgcdc.commit_queue q
                              where q.table_id = s.table_id and q.txid >= s.watermark
                                and not pgcdc._applied(q.txid, s.out_of_order)
                              order by q.txid limit 1) p on true
         where s.resync_reason is null
    loop
        if max_age is not null and r.oldest < now() - max_age then
            reason := format('its oldest unapplied change is older than the retention limit of %s', max_age);
        elsif queue_bytes > max_bytes and r.lowest and r.oldest is not null then
            reason := format('the queue (%s) outgrew the retention limit of %s while it was furthest behind',
                             pg_size_pretty(queue_bytes), pg_size_pretty(max_bytes));
        else
            continue;
        end if;
        -- a running ingest holds its consumer's lease (this session's own included: the calling
        -- ingest's); the row lock taken here keeps one from starting until maintain commits
        select pgcdc._lock_held(c.lock_key, c.lock_pid) into running
          from pgcdc.consumer c where c.consumer_id = r.consumer_id for update;
        running := running or cardinality(pgcdc._workers(r.consumer)) > 0;
        continue when running;
        update pgcdc.consumer_state s set resync_reason = reason, copy_from = null
         where s.consumer = r.consumer and s.table_id = r.table_id;
        consumer := r.consumer;
        table_name := r.relid::text;
        return next;
    end loop;
end
$fn$;
