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
