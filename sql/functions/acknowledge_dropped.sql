-- pgcdc.acknowledge_dropped(name): forget the record of a dropped attached table (`pgcdc detach
-- NAME` of a table that no longer exists). Returns false if none was recorded under that name.
create or replace function pgcdc.acknowledge_dropped(name text)
returns boolean
language sql
set search_path = pg_catalog, pg_temp
as $$
    with gone as (delete from pgcdc.forgotten f where f.table_name = name returning 1)
    select exists (select 1 from gone)
$$;
