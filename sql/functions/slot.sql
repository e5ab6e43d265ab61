-- pgcdc._slot(txid): the queue slot of a txid, (txid / slot_txids) % queue_slots. The capture
-- functions inline the same expression with the values of pgcdc.meta (regenerated on change).
create or replace function pgcdc._slot(txid xid8)
returns int2
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
    select ((txid::text::bigint / max(value::bigint) filter (where key = 'slot_txids'))
            % max(value::bigint) filter (where key = 'queue_slots'))::int2
      from pgcdc.meta
$$;
