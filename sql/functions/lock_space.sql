-- pgcdc._lock_space(): the first key of every consumer's advisory lock.
create or replace function pgcdc._lock_space()
returns int
language sql
immutable
set search_path = pg_catalog, pg_temp
as $$ select 1885563747 $$;  -- 'pgcc'
