-- pgcdc._key_expr(cols, rel): the SQL expression that turns a row's key columns into the
-- queue's text form: the value's text for one-column keys, a text[] literal of the
-- values for composite keys. Used by _generate_capture; the ingest job decodes it
-- (pgcdc/source/enrich.py).
-- The text comes from each type's output function through format('%s'), never from a cast:
-- casts are not looked up through search_path, so a table owner could add a cast from a
-- type of its own to text and have capture run it (docs/security.md). The capture function
-- pins DateStyle/IntervalStyle/TimeZone where a key's text depends on them (_time_dependent).
create or replace function pgcdc._key_expr(cols text[], rel text default null)
returns text
language sql
immutable
set search_path = pg_catalog, pg_temp
as $$
    select case when cardinality(cols) = 1
        then format('pg_catalog.format(''%%s'', %s%I)', coalesce(rel || '.', ''), cols[1])
        else format('pg_catalog.format(''%%s'', array[%s])',
                    (select string_agg(format('pg_catalog.format(''%%s'', %s%I)', coalesce(rel || '.', ''), c), ', '
                                       order by o)
                       from unnest(cols) with ordinality u(c, o)))
    end
$$;
