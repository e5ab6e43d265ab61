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
