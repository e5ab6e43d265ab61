-- pgcdc._partition_bounds(root): each partition of a partitioned table's tree (oid text: object)
-- described so that a consumer can find its rows in a Delta table, and in the root, after it is
-- truncated or dropped (pgcdc/source/bounds.py): {"partition": its name, "oid", "parent": its
-- parent's oid, "ancestors": the partitions above it (below the root), "levels": its own bound,
-- then each ancestor's below the root, each as
-- {"strategy" (r, l, h), "attnums" (the key's columns by the root's numbers; null: an expression),
-- "bytes" (per key column: compared as bytes, a "C" collation or none), "bound"
-- (pg_get_expr of relpartbound), "siblings" (a DEFAULT partition's: the other bounds)}}.
-- Values print with pinned settings, so a bound's text does not depend on the session's.
-- Stored in pgcdc.attached.bounds by _generate_capture; _on_drop reads it after a drop.
create or replace function pgcdc._partition_bounds(p_root regclass)
returns jsonb
language sql
stable
set search_path = pg_catalog, pg_temp
set datestyle to 'ISO, YMD'
set intervalstyle to 'postgres'
set timezone to 'UTC'
set extra_float_digits to 3
set standard_conforming_strings to on
as $$
    with member as (
        select p.relid::oid as rel from pg_partition_tree(p_root) p where p.level > 0
    ), own as (
        select m.rel, i.inhparent as parent, pg_get_expr(c.relpartbound, c.oid) as bound,
               pt.partstrat, pt.partattrs::int2[] as attrs, pt.partcollation::oid[] as colls
          from member m
          join pg_class c on c.oid = m.rel
          join pg_inherits i on i.inhrelid = m.rel
          join pg_partitioned_table pt on pt.partrelid = i.inhparent
    ), described as (
        select o.rel, o.parent, jsonb_build_object(
            'strategy', o.partstrat,
            'attnums', case when not 0 = any(o.attrs) then
                (select jsonb_agg(r.attnum order by k.o)
                   from unnest(o.attrs) with ordinality k(n, o)
                   join pg_attribute pa on pa.attrelid = o.parent and pa.attnum = k.n
                   join pg_attribute r on r.attrelid = p_root and r.attname = pa.attname) end,
            'bytes', (select jsonb_agg(k.c = 0 or co.collname in ('C', 'POSIX')
                                       or (k.c = 100 and d.datlocprovider = 'c'
                                           and d.datcollate in ('C', 'POSIX', 'C.UTF-8', 'C.utf8')) order by k.o)
                        from unnest(o.colls) with ordinality k(c, o)
                        left join pg_collation co on co.oid = k.c
                        cross join pg_database d where d.datname = current_database()),
            'bound', o.bound,
            'siblings', case when o.bound = 'DEFAULT' then
                (select coalesce(jsonb_agg(s.bound order by s.rel), '[]') from own s
                  where s.parent = o.parent and s.bound <> 'DEFAULT') end) as d
          from own o
    )
    select coalesce(jsonb_object_agg(m.rel::text, jsonb_build_object(
               'partition', m.rel::regclass::text, 'oid', m.rel,
               'parent', (select d.parent from described d where d.rel = m.rel),
               'ancestors', (select coalesce(jsonb_agg(a.rel order by a.depth), '[]')
                               from pg_partition_ancestors(m.rel) with ordinality a(rel, depth)
                              where a.rel not in (m.rel, p_root::oid)),
               'levels', (select jsonb_agg(d.d order by a.depth)
                            from pg_partition_ancestors(m.rel) with ordinality a(rel, depth)
                            join described d on d.rel = a.rel))), '{}')
      from member m
$$;
