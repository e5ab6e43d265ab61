-- pgcdc._generate_capture(table_id): (re)create the capture function and triggers of
-- one attached table from its row in pgcdc.attached. Called by attach and by install,
-- so an upgrade refreshes the capture code of every attached table.
-- Touches: function pgcdc.capture_<table_id>() and triggers pgcdc_capture_{ins,upd,pk,del,trunc}.
--
-- Design (see docs/capture.md for the measurements behind it):
-- * statement-level triggers with transition tables: one queue row per statement,
--   large statements split into chunks of chunk_size keys as the keys stream by;
-- * each event goes to its txid's queue slot;
-- * UPDATE reads only the new rows; the old key of a row whose key changes is recorded
--   by a row-level "AFTER UPDATE OF <key columns> ... WHEN (key changed)" trigger, which
--   PostgreSQL skips outright for UPDATEs that do not set a key column;
-- * with a predicate, UPDATE reads old and new rows so a row leaving the predicate
--   still reaches the consumer;
-- * a partitioned table: the same triggers on every table of its tree (a statement fires only
--   the triggers of the table it names: root, branch or leaf), all queueing under the root's
--   table_id; UPDATE reads old and new rows, since an UPDATE that moves a row to another
--   partition fires no row-level UPDATE trigger (it becomes a delete and an insert).
-- Security (docs/security.md): the function is SECURITY DEFINER owned by pgcdc_capture, a
-- NOLOGIN role that may only insert into the queue; its search_path is pinned; every
-- operator is written operator(pg_catalog.x); key text comes from output functions
-- (_key_expr), never a cast; a predicate holds only built-in immutable functions
-- (_check_predicate); PUBLIC may not execute it, and fired for another table (tg_relid) it
-- reads nothing of it. The body is quoted with a dollar tag that does not occur in it.
create or replace function pgcdc._generate_capture(p_table_id int, chunk_size int default 10000)
returns void
language plpgsql
set search_path = pg_catalog, pg_temp
set check_function_bodies = on
as $fn$
declare
    a pgcdc.attached;
    fname text;
    settings text := E'\n    set search_path = pg_catalog, pg_temp';
    key_new text;
    key_old text;
    keys_ins text;
    keys_upd text;
    keys_del text;
    fits text;
    fit_names text;
    pk_changed text;
    pk_cols text;
    ins_tpl text;
    body text;
    tag text := 'pgcdc';
    v_slot text;
    v_t text;
    v_shard text;
    v_slot_txids bigint := (select value::bigint from pgcdc.meta where key = 'slot_txids');
    v_slots int := (select value::int from pgcdc.meta where key = 'queue_slots');
    v_member regclass;
    v_mine text;
    v_both boolean;
    v_truncated text := 'null';
    v_row text := '';
begin
    update pgcdc.attached t
       set shape = pgcdc._shape(t.relid),
           types = pgcdc._types(t.relid),
           members = pgcdc._members(t.relid),
           bounds = case when pgcdc._members(t.relid) is not null then pgcdc._partition_bounds(t.relid) end
     where table_id = p_table_id;
    select * into strict a from pgcdc.attached where table_id = p_table_id;
    v_both := a.predicate is not null or a.members is not null;  -- UPDATE reads old and new rows
    fname := format('pgcdc.%I', 'capture_' || a.table_id);
    v_shard := coalesce(a.shard::text, 'null');
    key_new := pgcdc._key_expr(a.key_columns);
    key_old := pgcdc._key_expr(a.key_columns, 'old');
    -- each keys_* is a query yielding the statement's keys as column k
    if a.predicate is null then
        keys_ins := format('select %s as k from pgcdc_new', key_new);
        keys_upd := case when v_both then format('select %1$s as k from pgcdc_old union select %1$s from pgcdc_new',
                                                  key_new)
                         else keys_ins end;
        keys_del := format('select %s as k from pgcdc_old', key_new);
    else
        keys_ins := format('select %s as k from pgcdc_new where (%s)', key_new, a.predicate);
        keys_upd := format('select %1$s as k from pgcdc_old where (%2$s) union select %1$s from pgcdc_new where (%2$s)',
                           key_new, a.predicate);
        keys_del := format('select %s as k from pgcdc_old where (%s)', key_new, a.predicate);
    end if;
    if pgcdc._time_dependent(array(select t.atttypid from pg_attribute t
                                    where t.attrelid = a.relid and t.attnum = any(a.key_attnums))) then
        -- the key's text form must not depend on the writer's settings
        settings := settings || E'\n    set datestyle to ''ISO, YMD''\n    set intervalstyle to ''postgres''\n    set timezone to ''UTC''';
    end if;
    v_slot := format('((pg_catalog.pg_current_xact_id()::pg_catalog.text::pg_catalog.int8 operator(pg_catalog./) %s) '
                     'operator(pg_catalog.%%) %s)::pg_catalog.int2', v_slot_txids, v_slots);

    -- The column names the code uses (key and predicate columns) must still be the table's: DDL
    -- the pgcdc_ddl event trigger did not see may have renamed or dropped one. A check by column
    -- number, without a subtransaction: a plain expression, cheap enough for every statement.
    select string_agg(format('(pg_catalog.pg_identify_object_as_address(1259::pg_catalog.oid, %s::pg_catalog.oid, '
                             '%s)).object_names[3] operator(pg_catalog.=) %L', a.relid::oid, t.attnum,
                             t.attname), E'\n           and ' order by t.attnum),
           string_agg(t.attname, ', ' order by t.attnum)
      into fits, fit_names
      from pg_attribute t
     where t.attrelid = a.relid and t.attnum > 0 and not t.attisdropped
       and t.attname = any(a.key_columns || coalesce(a.predicate_columns, '{}'));

    -- %1$s op letter, %2$s keys query. A statement's keys go into one event when there are at
    -- most chunk_size of them (read into a variable, then one INSERT ... VALUES: ~2 us a statement
    -- cheaper than an INSERT ... SELECT over the transition table, bench notes in
    -- docs/performance.md); else they are grouped into chunks of chunk_size as they stream from
    -- the transition table (which spills to disk), so capture holds one chunk in memory, not all
    -- keys, whatever the statement's size.
    ins_tpl := format($t$pgcdc_keys := array(select k0.k from (%%2$s) k0 limit %5$s);
        if pg_catalog.cardinality(pgcdc_keys) operator(pg_catalog.<=) %4$s then
            if pg_catalog.cardinality(pgcdc_keys) operator(pg_catalog.>) 0 then
                insert into pgcdc.commit_queue (txid, slot, table_id, op, shard, keys)
                values (pg_catalog.pg_current_xact_id(), %1$s, %2$s, '%%1$s', %3$s, pgcdc_keys);
            end if;
        else
            insert into pgcdc.commit_queue (txid, slot, table_id, op, shard, keys)
            select pg_catalog.pg_current_xact_id(), %1$s, %2$s, '%%1$s', %3$s, pg_catalog.array_agg(r.k)
              from (select s.k, (pg_catalog.row_number() over () operator(pg_catalog.-) 1) operator(pg_catalog./) %4$s as g
                      from (%%2$s) s) r
             group by r.g;
        end if;$t$,
        replace(v_slot, '%', '%%'), a.table_id, v_shard, chunk_size, chunk_size + 1);
    v_t := format($t$insert into pgcdc.commit_queue (txid, slot, table_id, op, shard, keys, payload)
            values (pg_catalog.pg_current_xact_id(), %s, %s, 'T', %s, null, %%s);$t$, replace(v_slot, '%', '%%'), a.table_id, v_shard);

    -- a partition truncated: its T event carries the partition's bound (pgcdc._partition_bounds),
    -- so a consumer replaces its rows alone; the table itself truncated: a copy of all of it
    if a.bounds is not null and a.bounds <> '{}' then
        select format('case %s end', string_agg(format('when tg_relid operator(pg_catalog.=) %s::pg_catalog.oid '
                                                        'then %L::pg_catalog.jsonb', b.key, b.value), ' '))
          into v_truncated
          from jsonb_each(a.bounds) b;
    end if;

    -- on a subscriber (pgcdc.on_subscriber): the row trigger's events, one key a row
    if a.on_subscriber then
        if a.members is not null then
            raise exception using errcode = 'PC008',
                message = format('%s is partitioned: capture on a subscriber is for plain tables', a.relid),
                hint = 'attach it without --on-subscriber';
        end if;
        v_row := format($r$
    if tg_name operator(pg_catalog.=) 'pgcdc_capture_row' then  -- a subscription's apply worker (a replica)
        if tg_op operator(pg_catalog.<>) 'INSERT' and (%1$s) then
            insert into pgcdc.commit_queue (txid, slot, table_id, op, shard, keys)
            values (pg_catalog.pg_current_xact_id(), %3$s, %4$s, pg_catalog.left(tg_op, 1), %5$s, array[%6$s]);
        end if;
        if tg_op operator(pg_catalog.<>) 'DELETE' and (%2$s) then
            insert into pgcdc.commit_queue (txid, slot, table_id, op, shard, keys)
            values (pg_catalog.pg_current_xact_id(), %3$s, %4$s, pg_catalog.left(tg_op, 1), %5$s, array[%7$s]);
        end if;
        return null;
    end if;$r$,
            case when a.predicate is null then 'true'
                 else format('exists (select from (select old.*) pgcdc_r where (%s))', a.predicate) end,
            case when a.predicate is null then 'true'
                 else format('exists (select from (select new.*) pgcdc_r where (%s))', a.predicate) end,
            v_slot, a.table_id, v_shard, key_old, pgcdc._key_expr(a.key_columns, 'new'));
    end if;

    -- the tables it may fire for: the table, or every table of its partition tree
    v_mine := case when a.members is null then format('tg_relid operator(pg_catalog.<>) %s::pg_catalog.oid', a.relid::oid)
                   else format('not tg_relid operator(pg_catalog.=) any (%L::pg_catalog.oid[])', a.members) end;
    body := format($body$
#variable_conflict use_column
-- generated by pgcdc._generate_capture for table_id %1$s; do not edit
declare
    pgcdc_key text[];
    pgcdc_keys text[];
begin
    if %3$s then
        -- fired for a table it was not made for: the database was restored from a dump (tables get
        -- new oids), or someone allowed to run it attached it elsewhere. Never read that table's
        -- columns, never fail the statement: queue a copy of its own table, warn, and let
        -- `pgcdc status` say so until `pgcdc install` (or attach) makes it anew.
        %14$s
        raise warning using
            message = pg_catalog.concat('pgcdc: the capture code of table_id %1$s fired for ',
                                        pg_catalog.quote_ident(tg_table_schema), '.',
                                        pg_catalog.quote_ident(tg_table_name), ', not the table it was made for'),
            hint = 'run `pgcdc install` (after a restore: `pgcdc reset-watermark`), which makes it anew';
        return null;
    end if;
    if tg_op operator(pg_catalog.=) 'TRUNCATE' then
        %4$s
        return null;
    end if;
    if not (%5$s) then
        -- a column this code names was renamed or dropped: queue a copy of the table and warn,
        -- never fail the statement (`pgcdc status` says so until `pgcdc attach`)
        %6$s
        raise warning using
            message = pg_catalog.concat('pgcdc: capture of ', pg_catalog.quote_ident(tg_table_schema), '.',
                                        pg_catalog.quote_ident(tg_table_name), ' no longer fits the table (', %7$L,
                                        '): its next sync copies it'),
            hint = 'run `pgcdc attach TABLE` so capture follows the table again';
        return null;
    end if;
%15$s
    if tg_level operator(pg_catalog.=) 'ROW' then  -- fired only when an UPDATE changes the key: record the old key
        pgcdc_key := array[%8$s];
        insert into pgcdc.commit_queue (txid, slot, table_id, op, shard, keys)
        values (pg_catalog.pg_current_xact_id(), %9$s, %1$s, 'U', %10$s, pgcdc_key);
    elsif tg_op operator(pg_catalog.=) 'INSERT' then
        %11$s
    elsif tg_op operator(pg_catalog.=) 'UPDATE' then
        %12$s
    else
        %13$s
    end if;
    return null;
end
$body$, a.table_id, a.relid::text, v_mine, format(v_t, v_truncated), fits,
        format(v_t, format('pg_catalog.jsonb_build_object(''capture_error'', %L)',
                           format('a column of %s was renamed or dropped', fit_names))),
        format('a column of %s was renamed or dropped', fit_names), key_old, v_slot, v_shard,
        format(ins_tpl, 'I', keys_ins), format(ins_tpl, 'U', keys_upd), format(ins_tpl, 'D', keys_del),
        format(v_t, format('pg_catalog.jsonb_build_object(''capture_error'', %L)',
                           'its capture code was made for another table (a restore from a dump?)')), v_row);
    -- a dollar tag that does not occur in the body (names and predicates may hold any text)
    while position('$' || tag || '$' in body) > 0 loop
        tag := tag || '_';
    end loop;
    execute format(E'create or replace function %1$s() returns trigger\n    language plpgsql\n    security definer%2$s\nas $%3$s$%4$s$%3$s$',
                   fname, settings, tag, body);
    execute format('revoke all on function %s() from public', fname);
    perform pgcdc._own_capture((fname || '()')::regprocedure);

    perform pgcdc._drop_capture_triggers(a.relid, a.table_id);
    select string_agg(format('old.%1$I is distinct from new.%1$I', c), ' or '), string_agg(format('%I', c), ', ')
      into pk_changed, pk_cols
      from unnest(a.key_columns) c;
    for v_member in select m::regclass from unnest(coalesce(a.members, array[a.relid::oid])) m loop
        execute format('create trigger pgcdc_capture_ins after insert on %s referencing new table as pgcdc_new '
                       'for each statement execute function %s()', v_member, fname);
        if not v_both then
            execute format('create trigger pgcdc_capture_upd after update on %s referencing new table as pgcdc_new '
                           'for each statement execute function %s()', v_member, fname);
            -- "update of <key columns>": skipped outright unless the UPDATE sets a key column
            execute format('create trigger pgcdc_capture_pk after update of %s on %s for each row when (%s) '
                           'execute function %s()', pk_cols, v_member, pk_changed, fname);
        else
            execute format('create trigger pgcdc_capture_upd after update on %s referencing old table as pgcdc_old '
                           'new table as pgcdc_new for each statement execute function %s()', v_member, fname);
        end if;
        execute format('create trigger pgcdc_capture_del after delete on %s referencing old table as pgcdc_old '
                       'for each statement execute function %s()', v_member, fname);
        execute format('create trigger pgcdc_capture_trunc after truncate on %s '
                       'for each statement execute function %s()', v_member, fname);
        if a.on_subscriber then
            -- a subscription's apply worker writes as a replica and fires row-level triggers alone:
            -- a row trigger that fires only then (ENABLE REPLICA: never beside the statement
            -- triggers, which fire only for the origin's writes), and the truncate trigger always
            execute format('create trigger pgcdc_capture_row after insert or update or delete on %s '
                           'for each row execute function %s()', v_member, fname);
            execute format('alter table %s enable replica trigger pgcdc_capture_row', v_member);
            execute format('alter table %s enable always trigger pgcdc_capture_trunc', v_member);
        end if;
    end loop;
end
$fn$;
