-- pgcdc.on_subscriber(tbl, fire): make the capture triggers of an attached table fire also under
-- session_replication_role = replica (ALTER TABLE ... ENABLE ALWAYS TRIGGER), as a logical
-- replication subscriber's apply worker writes, so a table fed by a subscription is captured; or
-- (fire false) back to firing as origin triggers do. pgcdc.attached.on_subscriber keeps the
-- choice, and _generate_capture applies it each time it makes the triggers. Called by `pgcdc
-- attach --on-subscriber` (every attach sets it). Touches: pgcdc.attached, capture triggers.
create or replace function pgcdc.on_subscriber(tbl regclass, fire boolean)
returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $fn$
declare
    v_id int := (select a.table_id from pgcdc.attached a where a.relid = tbl);
begin
    if v_id is null then
        raise exception using errcode = 'PC008', message = format('%s is not attached', tbl),
            hint = format('run `pgcdc attach %s` first', tbl);
    end if;
    if (select a.on_subscriber from pgcdc.attached a where a.table_id = v_id) is distinct from fire then
        update pgcdc.attached set on_subscriber = fire where table_id = v_id;
        perform pgcdc._generate_capture(v_id);
    end if;
end
$fn$;
