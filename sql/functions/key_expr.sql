-- pgcdc._key_expr(cols, rel): the SQL expression that turns a row's key columns into the
-- queue's text form: the value's text for one-column keys, a text[] literal of the
-- values for composite keys. Used by _generate_capture; the ingest job decodes it
-- (pgcdc/enrich.py). Names are fully qualified: the capture code must not depend on
-- the writer's search_path.
create or replace function pgcdc._key_expr(cols text[], rel text default null)
returns text
language sql
immutable
as $$
    select case when cardinality(cols) = 1
        then format('%s%I::pg_catalog.text', coalesce(rel || '.', ''), cols[1])
        else format('array[%s]::pg_catalog.text',
                    (select string_agg(format('%s%I::pg_catalog.text', coalesce(rel || '.', ''), c), ', ' order by o)
                       from unnest(cols) with ordinality u(c, o)))
    end
$$;
