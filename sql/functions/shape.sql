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

-- pgcdc._types(tbl): each column's type by its number ({"2": "integer", ...}): what the rewrite guard
-- (pgcdc._on_rewrite) compares a retype with.
create or replace function pgcdc._types(tbl regclass)
returns jsonb
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
    select coalesce(jsonb_object_agg(attnum::text, format_type(atttypid, atttypmod)), '{}')
      from pg_attribute where attrelid = tbl and attnum > 0 and not attisdropped
$$;

-- pgcdc._widens(old, new): whether every value of type `old` is the same value of type `new`
-- (format_type's names), for the retypes a Delta table can take by a cast of its own column
-- (pgcdc/lake/evolve.py `widens`): smallint -> integer -> bigint, real -> double precision,
-- numeric(p,s) -> numeric(p2,s2) with no fewer digits on either side of the point.
create or replace function pgcdc._widens(old text, new text)
returns boolean
language sql
immutable
set search_path = pg_catalog, pg_temp
as $$
    select case
        when (old, new) in (('smallint', 'integer'), ('smallint', 'bigint'), ('integer', 'bigint'),
                            ('real', 'double precision')) then true
        when old ~ '^numeric\(\d+,\d+\)$' and new ~ '^numeric\(\d+,\d+\)$' then
            (select n[2] >= o[2] and n[1] - n[2] >= o[1] - o[2]
               from (select regexp_match(old, '^numeric\((\d+),(\d+)\)$')::int[] o,
                            regexp_match(new, '^numeric\((\d+),(\d+)\)$')::int[] n) m)
        else false end
$$;
