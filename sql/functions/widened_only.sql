-- pgcdc._widened_only(a, reason, query): whether the rewrite of attached table `a` by `query` (one
-- ALTER TABLE statement, the client's whole query, without USING: no expression of the user's
-- computes the new values) only retyped columns (rewrite reason 4), each to a type that holds
-- its every value unchanged (pgcdc._widens against the types the capture code was made with).
create or replace function pgcdc._widened_only(a pgcdc.attached, reason int, query text)
returns boolean
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
    select reason = 4 and a.types is not null
       and query ~* '^\s*alter\s+table\s' and query !~* '\musing\M'
       and strpos(rtrim(rtrim(query), '; '), ';') = 0
       and not exists (select 1 from jsonb_each_text(a.types) o(attnum, old)
                         join pg_attribute n on n.attrelid = a.relid and n.attnum = o.attnum::int2 and not n.attisdropped
                        where format_type(n.atttypid, n.atttypmod) <> o.old
                          and not pgcdc._widens(o.old, format_type(n.atttypid, n.atttypmod)))
       and exists (select 1 from jsonb_each_text(a.types) o(attnum, old)
                     join pg_attribute n on n.attrelid = a.relid and n.attnum = o.attnum::int2 and not n.attisdropped
                    where format_type(n.atttypid, n.atttypmod) <> o.old)
$$;
