-- pgcdc._shape_difference(a, b): how table b's columns differ from table a's (the first column
-- whose name or type differs, or one that one of them lacks), or null if they are the same: the
-- sources of a fan-in must agree (pgcdc.attach).
create or replace function pgcdc._shape_difference(a regclass, b regclass)
returns text
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
    with ca as (select row_number() over (order by attnum) n, attname, format_type(atttypid, atttypmod) t
                  from pg_attribute where attrelid = a and attnum > 0 and not attisdropped),
         cb as (select row_number() over (order by attnum) n, attname, format_type(atttypid, atttypmod) t
                  from pg_attribute where attrelid = b and attnum > 0 and not attisdropped)
    select case when cb.n is null then format('column %I %s is missing', ca.attname, ca.t)
                when ca.n is null then format('column %I %s is extra', cb.attname, cb.t)
                when ca.attname <> cb.attname then format('column %s is %I, not %I', ca.n, cb.attname, ca.attname)
                else format('column %I is %s, not %s', ca.attname, cb.t, ca.t) end
      from ca full join cb using (n)
     where (ca.attname, ca.t) is distinct from (cb.attname, cb.t)
     order by coalesce(ca.n, cb.n)
     limit 1
$$;
