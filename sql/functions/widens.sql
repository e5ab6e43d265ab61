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
