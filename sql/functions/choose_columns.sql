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
