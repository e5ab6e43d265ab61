-- pgcdc.maintain(ahead): keep the commit queue's partitions in shape. Creates the partition
-- for the current txid block and `ahead` blocks after it, drops partitions wholly below the
-- retention horizon, and empties the default partition once it is consumed. Safe to call
-- often (the ingest job calls it each run); concurrent calls wait for each other.
-- Touches: partitions pgcdc.commit_queue_<block> and pgcdc.commit_queue_default.
create or replace function pgcdc.maintain(ahead int default 3)
returns table (action text, partition_name text)
language plpgsql
set search_path = pg_catalog, pg_temp
as $fn$
declare
    size bigint := (select value::bigint from pgcdc.meta where key = 'partition_size');
    next_xid bigint := pg_snapshot_xmax(pg_current_snapshot())::text::bigint;
    horizon xid8 := pgcdc.retention_horizon();
    b bigint;
    r record;
begin
    perform pg_advisory_xact_lock(hashtext('pgcdc.maintain'));
    for b in (next_xid / size) .. (next_xid / size) + ahead loop
        continue when to_regclass(format('pgcdc.commit_queue_%s', b)) is not null;
        if exists (select 1 from pgcdc.commit_queue_default
                    where txid >= (b * size)::text::xid8 and txid < ((b + 1) * size)::text::xid8) then
            -- events already landed in the default partition for this block; it keeps serving them
            action := 'kept in default'; partition_name := format('pgcdc.commit_queue_%s', b);
            return next;
            continue;
        end if;
        execute format('create table pgcdc.%I partition of pgcdc.commit_queue for values from (%L) to (%L)',
                       'commit_queue_' || b, b * size, (b + 1) * size);
        action := 'created'; partition_name := format('pgcdc.commit_queue_%s', b);
        return next;
    end loop;

    if horizon is null then
        return;
    end if;
    for r in select c.relname, substring(c.relname from 'commit_queue_(\d+)$')::bigint as block
               from pg_inherits i join pg_class c on c.oid = i.inhrelid
              where i.inhparent = 'pgcdc.commit_queue'::regclass and c.relname ~ '^commit_queue_\d+$'
    loop
        if ((r.block + 1) * size)::text::xid8 <= horizon then
            execute format('drop table pgcdc.%I', r.relname);
            action := 'dropped'; partition_name := 'pgcdc.' || r.relname;
            return next;
        end if;
    end loop;
    if exists (select 1 from pgcdc.commit_queue_default)
       and not exists (select 1 from pgcdc.commit_queue_default where txid >= horizon) then
        truncate pgcdc.commit_queue_default;
        action := 'emptied'; partition_name := 'pgcdc.commit_queue_default';
        return next;
    end if;
end
$fn$;
