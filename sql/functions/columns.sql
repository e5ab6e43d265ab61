-- pgcdc._kept(mode, attnums, names, key_attnums, attnum, attname): whether an attached table's
-- sync reads one of its columns (pgcdc.attached column_mode, column_attnums, column_names): the
-- key always; with 'only' the columns numbered attnums; with 'except' every column but those
-- numbered attnums or named in names; with no mode every column. The one rule: the sync's
-- column list (pgcdc/source/columns.py) and the readers' column grants (_read_grants) both ask it.
create or replace function pgcdc._kept(mode text, attnums int2[], names text[], key_attnums int2[],
                                       attnum int2, attname name)
returns boolean
language sql
immutable
set search_path = pg_catalog, pg_temp
as $$
    select case when mode is null or attnum = any(key_attnums) then true
                when mode = 'only' then attnum = any(attnums)
                else not (attnum = any(attnums) or attname::text = any(names)) end
$$;

-- pgcdc._kept_names(tbl, mode, attnums, names, key_attnums): the names of the table's columns
-- a column choice keeps, in column order.
create or replace function pgcdc._kept_names(tbl regclass, mode text, attnums int2[], names text[],
                                             key_attnums int2[])
returns text[]
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
    select array_agg(t.attname::text order by t.attnum) from pg_attribute t
     where t.attrelid = tbl and t.attnum > 0 and not t.attisdropped
       and pgcdc._kept(mode, attnums, names, key_attnums, t.attnum, t.attname)
$$;

-- pgcdc.kept_columns(tbl): the names of the columns the attached table's sync reads, in column
-- order (every column of a table not attached).
create or replace function pgcdc.kept_columns(tbl regclass)
returns text[]
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
    select pgcdc._kept_names(tbl, a.column_mode, a.column_attnums, a.column_names, a.key_attnums)
      from (select 1) one left join pgcdc.attached a on a.relid = tbl
$$;

-- pgcdc._choose_columns(tbl, key_attnums, columns, exclude_columns, predicate_columns, later_names):
-- check an attach's column choice and return it as pgcdc.attached holds it (mode, attnums, names).
-- Every column named must exist (PC007); --exclude-columns may not name a key column, nor a column
-- the predicate reads (the reader may not read it); with --columns the key is kept whether named or
-- not, and the predicate's columns must be among them. later_names: the names the table's schema,
-- attached whole, leaves out (pgcdc.attached_schema.exclude_columns): left out of this table too,
-- whether it has such a column now or gets one later; --columns may not keep one of them.
drop function if exists pgcdc._choose_columns(regclass, int2[], text[], text[], text[]);  -- (schema v12's)
create or replace function pgcdc._choose_columns(tbl regclass, key_attnums int2[], columns text[],
                                                 exclude_columns text[], predicate_columns text[],
                                                 later_names text[],
                                                 out mode text, out attnums int2[], out names text[])
language plpgsql
stable
set search_path = pg_catalog, pg_temp
as $fn$
declare
    v_named text[] := coalesce(columns, exclude_columns);
    v_out text[];
    v_missing text;
    v_bad text;
begin
    if columns is not null and exclude_columns is not null then
        raise exception using errcode = 'PC007',
            message = format('choose the columns of %s with --columns or with --exclude-columns, not both', tbl),
            hint = '--columns a,b keeps only those (and the key); --exclude-columns c,d keeps all but those';
    end if;
    if v_named is not null and cardinality(v_named) = 0 then
        raise exception using errcode = 'PC007', message = format('no column named for %s', tbl),
            hint = 'name columns: --columns a,b or --exclude-columns c,d';
    end if;
    select string_agg(u.c, ', ') into v_missing from unnest(v_named) u(c)
     where not exists (select 1 from pg_attribute t where t.attrelid = tbl and t.attname = u.c
                                                      and t.attnum > 0 and not t.attisdropped);
    if v_missing is not null then
        raise exception using errcode = 'PC007', message = format('table %s has no column %s', tbl, v_missing),
            hint = 'name its columns as \d lists them (case matters)';
    end if;
    select string_agg(c, ', ') into v_bad from unnest(columns) c where c = any(later_names);
    if v_bad is not null then
        raise exception using errcode = 'PC007',
            message = format('schema %s, attached whole, leaves out %s: --columns may not keep it in %s',
                             (select format('%I', n.nspname) from pg_class r join pg_namespace n
                                  on n.oid = r.relnamespace where r.oid = tbl), v_bad, tbl),
            hint = 'leave it off --columns';
    end if;
    if columns is null then
        v_out := array(select distinct c from unnest(coalesce(exclude_columns, '{}') || coalesce(later_names, '{}')) c
                        order by c);
        if cardinality(v_out) = 0 then
            return;  -- (every column)
        end if;
    end if;
    select string_agg(t.attname::text, ', ') into v_bad from pg_attribute t
     where t.attrelid = tbl and t.attnum = any(key_attnums) and t.attname::text = any(v_out);
    if v_bad is not null then
        raise exception using errcode = 'PC007',
            message = format('%s is a key column of %s: it cannot be left out', v_bad, tbl),
            hint = 'every key column lands (rows are found by it); leave it off --exclude-columns';
    end if;
    mode := case when columns is not null then 'only' else 'except' end;
    select array_agg(t.attnum order by t.attnum), array_agg(t.attname::text order by t.attnum) into attnums, names
      from pg_attribute t where t.attrelid = tbl and t.attname::text = any(coalesce(columns, v_out)) and t.attnum > 0
       and not t.attisdropped;
    attnums := coalesce(attnums, '{}');  -- (a null would make pgcdc._kept null: no column kept)
    if columns is null then  -- (the names the table lacks yet: a column of that name added later stays out)
        names := coalesce(names, '{}') || array(select c from unnest(v_out) c where not c = any(coalesce(names, '{}'))
                                                 order by c);
    end if;
    select string_agg(distinct c, ', ') into v_bad from unnest(predicate_columns) c
     where not exists (select 1 from pg_attribute t where t.attrelid = tbl and t.attname::text = c
                          and pgcdc._kept(mode, attnums, names, key_attnums, t.attnum, t.attname));
    if v_bad is not null then
        raise exception using errcode = 'PC007',
            message = format('the predicate of %s reads column %s, which the column choice leaves out', tbl, v_bad),
            hint = 'keep the columns the --where predicate names (the reader must read them), or change the predicate';
    end if;
end
$fn$;

-- pgcdc._read_grants(tbl, role): the statements that let a reader role (with USAGE on the table's
-- schema) read the attached table as its sync does: SELECT on the whole table, or, with a column choice, SELECT on its kept
-- columns (and ctid, by which a copy reads page ranges) only after the table-wide SELECT is
-- revoked (that revokes its column grants too), so the role cannot read a column left out, even
-- by mistake.
create or replace function pgcdc._read_grants(tbl regclass, p_role regrole)
returns text[]
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
    select case when a.column_mode is null then array[format('grant select on %s to %s', tbl, p_role)]
                else array[format('revoke select on %s from %s', tbl, p_role),
                           format('grant select (%s, ctid) on %s to %s',
                                  (select string_agg(format('%I', k), ', ') from unnest(pgcdc.kept_columns(tbl)) k),
                                  tbl, p_role)] end
      from (select 1) one left join pgcdc.attached a on a.relid = tbl
$$;

-- pgcdc._grant_readers(table_id): grant every reader role `pgcdc grant` made what _read_grants
-- says for the attached table (attach; DDL that adds a column a column choice keeps).
create or replace function pgcdc._grant_readers(p_table_id int)
returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $fn$
declare
    v_role regrole;
    v_stmt text;
    v_rel regclass;
    v_schema name;
begin
    select a.relid, n.nspname into v_rel, v_schema from pgcdc.attached a join pg_class c on c.oid = a.relid
      join pg_namespace n on n.oid = c.relnamespace where a.table_id = p_table_id;
    for v_role in select to_regrole(g.role_name) from pgcdc.grantee g
                   where g.kind = 'reader' and to_regrole(g.role_name) is not null
    loop
        execute format('grant usage on schema %I to %s', v_schema, v_role);
        foreach v_stmt in array pgcdc._read_grants(v_rel, v_role) loop
            execute v_stmt;
        end loop;
    end loop;
end
$fn$;
