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
