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
