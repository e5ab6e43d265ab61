-- pgcdc.maintain(lock_wait): reclaim consumed queue history and enforce the retention limit.
-- Marks consumers past the retention limit for a resync (pgcdc._mark_lagging), then empties
-- every queue slot whose events every consumer has passed (below pgcdc.retention_horizon()).
--
-- Why it never loses an event: a slot is emptied only after its ACCESS EXCLUSIVE lock is
-- held. No transaction can then be adding to it, so every row in it is committed (or
-- aborted), and the check that follows, in a fresh snapshot, sees them all.
-- Why it never stalls the application: it waits at most lock_wait for a slot's lock (a writer
-- of that slot or a reader of the queue holding it) and then leaves the slot for a later
-- call; while it holds the lock, writers of other slots (all current writers, in normal
-- operation) do not touch it. No other DDL runs on the queue.
-- Safe to call often and from cron (the ingest job calls it each run); a call that finds
-- another one running returns at once (a SHARE UPDATE EXCLUSIVE lock on pgcdc.meta, which only
-- pgcdc's roles can take: it needs more than SELECT). Call it in READ COMMITTED (the default). Also forgets attached tables that were dropped.
-- SECURITY DEFINER with a pinned search_path and no input but lock_wait, so the ingest role
-- needs no TRUNCATE right on the queue (docs/security.md).
-- Touches: partitions pgcdc.commit_queue_s<n>, pgcdc.consumer_state (marks), dropped tables' rows.
drop function if exists pgcdc.maintain(int);  -- (schema v2's)
create or replace function pgcdc.maintain(lock_wait interval default '200ms')
returns table (action text, partition_name text)
language plpgsql
security definer
set search_path = pg_catalog, pg_temp
as $fn$
declare
    slots int := (select value::int from pgcdc.meta where key = 'queue_slots');
    part text;
    horizon xid8;
    ok boolean;
    saved_timeout text := current_setting('lock_timeout');
    r record;
begin
    if lock_wait > interval '10 s' then
        raise exception using errcode = '22023', message = 'pgcdc.maintain(): lock_wait is at most 10 s',
            hint = 'application writers wait behind a slot lock that is awaited';
    end if;
    if current_setting('transaction_isolation') <> 'read committed' then
        raise exception using errcode = '25000', message = 'pgcdc.maintain() must run in READ COMMITTED',
            hint = 'it checks each slot in a fresh snapshot after locking it';
    end if;
    begin  -- (a table lock takes no transaction id, unlike a row lock: maintain holds back no xmin)
        lock table pgcdc.meta in share update exclusive mode nowait;
    exception when lock_not_available then
        action := 'busy'; partition_name := 'another pgcdc.maintain() is running';
        return next;
        return;
    end;
    for r in select pgcdc._forget_dropped() as id loop
        action := 'detached'; partition_name := format('table_id %s: the table was dropped', r.id);
        return next;
    end loop;
    for r in select * from pgcdc._mark_lagging() loop
        action := 'resync needed'; partition_name := format('%s of consumer %s: %s', r.table_name, r.consumer, r.reason);
        return next;
    end loop;

    for s in 0 .. slots - 1 loop
        part := 'commit_queue_s' || s;
        horizon := pgcdc.retention_horizon();
        -- a cheap look first, without a lock: empty, or still holding what someone needs
        execute format('select exists (select 1 from pgcdc.%1$I) and not exists (select 1 from pgcdc.%1$I where txid >= $1)',
                       part) into ok using horizon;
        continue when horizon is null or not ok;
        begin
            perform set_config('lock_timeout', (extract(epoch from lock_wait) * 1000)::bigint || 'ms', true);
            execute format('lock table pgcdc.%I in access exclusive mode', part);
            execute format('select not exists (select 1 from pgcdc.%I where txid >= $1)', part)
               into ok using pgcdc.retention_horizon();
            if ok then
                execute format('truncate pgcdc.%I', part);
                action := 'emptied';
            else
                action := 'kept';  -- a writer committed into it while the lock was awaited
            end if;
        exception when lock_not_available then
            action := 'busy';  -- left for a later call
        end;
        perform set_config('lock_timeout', saved_timeout, true);
        partition_name := 'pgcdc.' || part;
        return next;
    end loop;
end
$fn$;
