-- pgcdc.attach(tbl, key_columns, predicate, shard, into_table, delta_partition_by, columns,
-- exclude_columns): start capturing a table's changes.
-- Attaching an attached table again with the same key, predicate and into_table updates its shard
-- and regenerates its capture code; with another key, predicate or into_table it is attached anew
-- (a new table_id: its consumers copy it again). Returns the table_id.
-- into_table: a fan-in, whose sources land in one Delta table of that name, each under its shard
-- (required, one per source): every source of a fan-in has the same key and columns.
-- delta_partition_by: a column of the table its Delta table is partitioned by (readers that filter
-- on it skip the other partitions); attaching again with another (or none) makes each consumer's
-- next run copy the table in the new layout.
-- columns / exclude_columns: the columns its sync reads (pgcdc._choose_columns; the key always);
-- the readers `pgcdc grant` made may then read those alone. Another choice on a table attached
-- already makes each consumer's next run copy it with the new columns (its columns changed).
-- Touches: pgcdc.attached, and (through _generate_capture) a capture function and four triggers.
-- Errors (SQLSTATE): PC001 no primary key, PC002 bad key columns, PC003 bad predicate,
-- PC004 key of a type whose text form or equality pgcdc cannot keep exact, PC006 a fan-in that does
-- not fit (no shard, a shard taken, another shape or column choice, a name an attached table has) or a
-- delta_partition_by that is no column (or beside a fan-in), PC005 a partition
-- (its root is attached instead) or a table of an inheritance tree (statements aimed at a child
-- bypass the parent's triggers), PC007 a column choice that does not fit, 42809 not a table. A partitioned table is captured whole: every
-- table of its tree, at any depth (_generate_capture).
drop function if exists pgcdc.attach(regclass, text[], text, int);  -- (schema v9's)
drop function if exists pgcdc.attach(regclass, text[], text, int, text);
drop function if exists pgcdc.attach(regclass, text[], text, int, text, text);  -- (schema v11's)
create or replace function pgcdc.attach(
    tbl regclass,
    key_columns text[] default null,
    predicate text default null,
    shard int default null,
    into_table text default null,
    delta_partition_by text default null,
    columns text[] default null,
    exclude_columns text[] default null
) returns int
language plpgsql
set search_path = pg_catalog, pg_temp
as $fn$
declare
    v_cols text[];
    v_types text[];
    v_id int;
    v_refused text;
    v_predicate text;
    v_pred_cols text[];
    v_attnums int2[];
    v_choice record;
    v_members oid[];
    v_other record;
    v_diff text;
    v_layout text;
    v_was boolean := false;  -- attached already (with the same options: the same table_id)
    v_rechosen boolean := false;  -- attached already, with another column choice
begin
    perform pgcdc._forget_dropped();
    if (select relkind from pg_class where oid = tbl) not in ('r', 'p') then
        raise exception using errcode = '42809', message = format('%s is not a table', tbl),
            hint = 'attach ordinary or partitioned tables only';
    end if;

    if (select relispartition from pg_class where oid = tbl) then
        raise exception using errcode = 'PC005',
            message = format('table %s is a partition of %s', tbl, pg_partition_root(tbl)),
            hint = format('attach the partitioned table instead: `pgcdc attach %s` captures every partition of it',
                          pg_partition_root(tbl));
    end if;
    if (select relkind from pg_class where oid = tbl) = 'r'
       and (exists (select 1 from pg_inherits where inhrelid = tbl or inhparent = tbl)) then
        raise exception using errcode = 'PC005',
            message = format('table %s is part of an inheritance tree', tbl),
            hint = 'pgcdc cannot capture it: statements aimed at a child do not fire the parent''s statement '
                   'triggers; a partitioned table (PARTITION BY) can be attached; see docs/capture.md';
    end if;

    if key_columns is null then
        select array_agg(a.attname::text order by k.ord), array_agg(format_type(a.atttypid, a.atttypmod) order by k.ord)
          into v_cols, v_types
          from pg_index i
         cross join lateral unnest(i.indkey) with ordinality k(attnum, ord)
          join pg_attribute a on a.attrelid = i.indrelid and a.attnum = k.attnum
         where i.indrelid = tbl and i.indisprimary;
        if v_cols is null then
            raise exception using errcode = 'PC001', message = format('table %s has no primary key', tbl),
                hint = 'add a primary key, or name a unique key (--key col1,col2)';
        end if;
    else
        select array_agg(c order by o), array_agg(format_type(a.atttypid, a.atttypmod) order by o)
          into v_cols, v_types
          from unnest(key_columns) with ordinality u(c, o)
          join pg_attribute a on a.attrelid = tbl and a.attname = u.c and a.attnum > 0 and not a.attisdropped;
        if coalesce(cardinality(v_cols), 0) <> cardinality(key_columns) or cardinality(key_columns) = 0 then
            raise exception using errcode = 'PC002',
                message = format('key columns %s not all found in table %s', array_to_string(key_columns, ', '), tbl),
                hint = 'name existing columns of the table';
        end if;
        -- the key must identify one row: require a unique index on exactly these columns
        if not exists (
            select 1 from pg_index i
             where i.indrelid = tbl and i.indisunique and i.indpred is null and i.indexprs is null
               and (select array_agg(a.attname::text order by a.attname)
                      from pg_attribute a where a.attrelid = tbl and a.attnum = any(i.indkey))
                   = (select array_agg(c order by c) from unnest(key_columns) c)) then
            raise exception using errcode = 'PC002',
                message = format('key columns (%s) of table %s have no unique index', array_to_string(key_columns, ', '), tbl),
                hint = 'create a unique index on them; a key must identify exactly one row';
        end if;
        if exists (select 1 from pg_attribute a where a.attrelid = tbl and a.attname = any(key_columns) and not a.attnotnull) then
            raise exception using errcode = 'PC002',
                message = format('key columns (%s) of table %s allow nulls', array_to_string(key_columns, ', '), tbl),
                hint = 'add NOT NULL to the key columns';
        end if;
    end if;

    -- Keys travel as text and are looked up again by value: refuse key types whose text form
    -- depends on the writer's session (floats: extra_float_digits; money: lc_monetary) or whose equality is not
    -- the equality of that text (citext, nondeterministic collations)
    select format('key column %I of table %s has type %s: %s', a.attname, tbl, format_type(a.atttypid, a.atttypmod),
                  case when b.typname in ('float4', 'float8') then 'its text form depends on the writer''s extra_float_digits'
                       when b.typname = 'money' then 'its text form depends on the writer''s lc_monetary'
                       when b.typname = 'citext' then 'it compares case-insensitively, its text does not'
                       else format('its collation %s is nondeterministic', co.collname) end)
      into v_refused
      from unnest(v_cols) u(c)
      join pg_attribute a on a.attrelid = tbl and a.attname = u.c
      join pg_type t on t.oid = a.atttypid
      join pg_type b on b.oid = case when t.typtype = 'd' then t.typbasetype else t.oid end
      left join pg_collation co on co.oid = a.attcollation
     where b.typname in ('float4', 'float8', 'citext', 'money') or not coalesce(co.collisdeterministic, true)
     limit 1;
    if v_refused is not null then
        raise exception using errcode = 'PC004', message = v_refused,
            hint = 'pgcdc cannot find rows by such a key exactly; name another unique NOT NULL key with --key '
                   '(or add one, e.g. a bigint identity column)';
    end if;

    if predicate is not null then
        select c.normalized, c.columns into v_predicate, v_pred_cols from pgcdc._check_predicate(tbl, predicate) c;
    end if;

    if into_table is not null then
        if shard is null then
            raise exception using errcode = 'PC006',
                message = format('%s cannot land in %s without a shard', tbl, into_table),
                hint = format('give each source of a fan-in its own shard number: `pgcdc attach %s --into %s --shard N`',
                              tbl, into_table);
        end if;
        if into_table !~ '^[^./\\[:cntrl:]]+\.[^./\\[:cntrl:]]+$' then
            raise exception using errcode = 'PC006',
                message = format('fan-in name %s is not of the form schema.table', into_table),
                hint = 'name the Delta table as a table is named, e.g. --into app.orders (one dot, no slashes)';
        end if;
        if exists (select 1 from pg_attribute a where a.attrelid = tbl and a.attname = '_pgcdc_shard'
                                                  and not a.attisdropped) then
            raise exception using errcode = 'PC006',
                message = format('%s has a column named _pgcdc_shard, which pgcdc keeps for a fan-in''s shard', tbl),
                hint = 'rename that column to land the table in a fan-in';
        end if;
        select a.table_name into v_diff from pgcdc.attached a
         where a.into_table is null and a.table_name = attach.into_table and a.relid <> tbl;
        if v_diff is not null then
            raise exception using errcode = 'PC006',
                message = format('%s is an attached table, which lands in a Delta table of that name', into_table),
                hint = 'choose another --into name (or detach that table)';
        end if;
        select a.relid::text as name into v_other from pgcdc.attached a
         where a.into_table = attach.into_table and a.shard = attach.shard and a.relid <> tbl;
        if v_other.name is not null then
            raise exception using errcode = 'PC006',
                message = format('shard %s of %s is %s''s', shard, into_table, v_other.name),
                hint = format('give %s another shard number (`pgcdc list` shows the shards taken)', tbl);
        end if;
        -- the same key and the same columns as the fan-in's other sources (the first found)
        select a.relid, a.key_columns into v_other from pgcdc.attached a
         where a.into_table = attach.into_table and a.relid <> tbl order by a.table_id limit 1;
        if v_other.relid is not null then
            if v_other.key_columns is distinct from v_cols then
                raise exception using errcode = 'PC006',
                    message = format('the key of %s (%s) is not the key of %s (%s), which lands in %s', tbl,
                                     array_to_string(v_cols, ', '), v_other.relid,
                                     array_to_string(v_other.key_columns, ', '), into_table),
                    hint = 'every source of a fan-in has the same key columns';
            end if;
            v_diff := pgcdc._shape_difference(v_other.relid, tbl);
            if v_diff is not null then
                raise exception using errcode = 'PC006',
                    message = format('%s does not have the columns of %s, which lands in %s: %s', tbl, v_other.relid,
                                     into_table, v_diff),
                    hint = 'every source of a fan-in has the same columns, of the same types, in the same order; '
                           'alter it to match (or land it elsewhere)';
            end if;
        end if;
        if delta_partition_by is not null then
            raise exception using errcode = 'PC006',
                message = format('%s lands in fan-in %s, whose Delta table is partitioned by its shard', tbl, into_table),
                hint = 'leave out --delta-partition-by for a fan-in''s source';
        end if;
    elsif exists (select 1 from pgcdc.attached a where a.into_table = tbl::text) then
        raise exception using errcode = 'PC006',
            message = format('%s is the name of a fan-in, whose sources land in a Delta table of that name', tbl),
            hint = format('land it in that fan-in (`pgcdc attach %s --into %s --shard N`) or detach the fan-in''s '
                          'sources first', tbl, tbl);
    end if;

    if delta_partition_by is not null and not exists (
            select 1 from pg_attribute t where t.attrelid = tbl and t.attname = delta_partition_by
               and t.attnum > 0 and not t.attisdropped) then
        raise exception using errcode = 'PC006',
            message = format('table %s has no column %s to partition its Delta table by', tbl, delta_partition_by),
            hint = 'name one of its columns (`pgcdc attach TABLE --delta-partition-by COLUMN`)';
    end if;

    -- attached again with another key or predicate: the queued events of the old options must never
    -- be read with the new ones, so the table gets a new table_id (the old events are ignored, and
    -- each consumer's next run copies the table: ingest.py copy_reason)
    v_attnums := (select array_agg(a.attnum order by u.o) from unnest(v_cols) with ordinality u(c, o)
                    join pg_attribute a on a.attrelid = tbl and a.attname = u.c);
    -- (a table of a schema attached whole leaves out what the schema leaves out: schemas.py)
    v_choice := pgcdc._choose_columns(tbl, v_attnums, columns, exclude_columns, v_pred_cols,
                                      (select s.exclude_columns from pgcdc.attached_schema s
                                         join pg_class r on r.relnamespace = s.schema_oid where r.oid = tbl));
    if delta_partition_by is not null
       and not delta_partition_by = any(pgcdc._kept_names(tbl, v_choice.mode, v_choice.attnums, v_choice.names,
                                                          v_attnums)) then
        raise exception using errcode = 'PC007',
            message = format('%s partitions its Delta table by column %s, which the column choice leaves out',
                             tbl, delta_partition_by),
            hint = 'keep that column, or partition by another';
    end if;
    if into_table is not null then
        select a.relid into v_other from pgcdc.attached a
         where a.into_table = attach.into_table and a.relid <> tbl order by a.table_id limit 1;
        if v_other.relid is not null and pgcdc.kept_columns(v_other.relid) is distinct from
               pgcdc._kept_names(tbl, v_choice.mode, v_choice.attnums, v_choice.names, v_attnums) then
            raise exception using errcode = 'PC006',
                message = format('%s would land other columns than %s, which lands in %s (its columns: %s)', tbl,
                                 v_other.relid, into_table, array_to_string(pgcdc.kept_columns(v_other.relid), ', ')),
                hint = 'give every source of a fan-in the same --columns or --exclude-columns';
        end if;
    end if;
    select table_id into v_id from pgcdc.attached t  -- (by column number: a renamed key is the same key)
     where t.relid = tbl and (t.key_attnums, t.predicate, t.into_table)
                             is distinct from (v_attnums, v_predicate, attach.into_table);
    if v_id is not null then
        perform pgcdc._forget(v_id, null);
    end if;
    select t.members, t.delta_partition_by, true,  -- (a copy only if the columns read change)
           pgcdc._kept_names(tbl, t.column_mode, t.column_attnums, t.column_names, t.key_attnums)
           is distinct from pgcdc._kept_names(tbl, v_choice.mode, v_choice.attnums, v_choice.names, v_attnums)
      into v_members, v_layout, v_was, v_rechosen
      from pgcdc.attached t where t.relid = tbl;

    insert into pgcdc.attached as t (relid, table_name, key_columns, key_types, predicate, predicate_columns, shard,
                                     key_attnums, into_table, delta_partition_by, column_mode, column_attnums,
                                     column_names)
    values (tbl, tbl::text, v_cols, v_types, v_predicate, v_pred_cols, shard, v_attnums, attach.into_table,
            attach.delta_partition_by, v_choice.mode, v_choice.attnums, v_choice.names)
    on conflict (relid) do update
        set key_columns = excluded.key_columns, key_types = excluded.key_types,
            predicate = excluded.predicate, predicate_columns = excluded.predicate_columns, shard = excluded.shard,
            table_name = excluded.table_name, delta_partition_by = excluded.delta_partition_by,
            key_attnums = excluded.key_attnums, column_mode = excluded.column_mode,
            column_attnums = excluded.column_attnums, column_names = excluded.column_names
    returning t.table_id into v_id;
    delete from pgcdc.forgotten f where f.table_name = tbl::text;
    delete from pgcdc.shard_gone g where g.into_table = attach.into_table and g.shard = attach.shard;

    perform pgcdc._generate_capture(v_id);
    if v_was and (v_layout is distinct from attach.delta_partition_by or v_rechosen) then
        perform pgcdc._queue_copy(v_id);  -- every consumer writes its Delta table in the new layout (or columns)
    end if;
    if v_members is not null and (v_members is distinct from (select t.members from pgcdc.attached t
                                                             where t.table_id = v_id)
                                  or not exists (select 1 from pg_event_trigger e
                                                  where e.evtname = 'pgcdc_ddl' and e.evtenabled <> 'D')) then
        -- its partitions changed where no event trigger saw it: rows may have come or gone unseen (without
        -- the event trigger, a partition attached and dropped again since leaves the tree as it was, and
        -- its rows, copied meanwhile, in Delta: attaching again always copies)
        perform pgcdc._queue_copy(v_id);
    end if;
    -- the reader roles `pgcdc grant` made may read it (docs/security.md)
    perform pgcdc._grant_readers(v_id);
    return v_id;
end
$fn$;
