-- pgcdc._shape(tbl): the names and types of a table's columns, in order: what a Delta copy of it
-- holds. DDL that changes it (add, drop, rename, retype a column) regenerates the capture code.
create or replace function pgcdc._shape(tbl regclass)
returns text
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
    select string_agg(format('%I %s', attname, format_type(atttypid, atttypmod)), ', ' order by attnum)
      from pg_attribute where attrelid = tbl and attnum > 0 and not attisdropped
$$;
