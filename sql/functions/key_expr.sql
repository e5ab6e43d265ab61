-- pgcdc._key_expr(cols): the SQL expression that turns a row's key columns into the
-- queue's text form. Used by attach when generating capture functions, and by the
-- ingest job to decode keys (its inverse is built in Python).
create or replace function pgcdc._key_expr(cols text[], rel text default null)
returns text
language sql
immutable
as $$
    select case when cardinality(cols) = 1
        then format('%s%I::text', coalesce(rel || '.', ''), cols[1])
        else format('array[%s]::text',
                    (select string_agg(format('%s%I::text', coalesce(rel || '.', ''), c), ', ' order by o)
                       from unnest(cols) with ordinality u(c, o)))
    end
$$;
