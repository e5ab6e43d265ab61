-- pgcdc._shape(tbl): the names and types of a table's columns, in order: what a Delta copy of it
-- holds. DDL that changes it (add, drop, rename, retype a column) needs the table copied again.
create or replace function pgcdc._shape(tbl regclass)
returns text
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
    select string_agg(format('%I %s', attname, format_type(atttypid, atttypmod)), ', ' order by attnum)
      from pg_attribute where attrelid = tbl and attnum > 0 and not attisdropped
$$;

-- pgcdc._members(tbl): a partitioned table's tree, the table first, then its partitions at every
-- depth (level, then oid); null for a table that is not partitioned. Its capture triggers sit on
-- each (pgcdc._generate_capture); pgcdc.attached.members keeps the tree they were made for.
create or replace function pgcdc._members(tbl regclass)
returns oid[]
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
    select case when (select c.relkind from pg_class c where c.oid = tbl) = 'p'
                then array[tbl::oid] || array(select p.relid::oid from pg_partition_tree(tbl) p
                                              where p.level > 0 order by p.level, p.relid::oid)
           end
$$;

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
