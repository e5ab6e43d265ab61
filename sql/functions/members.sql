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
