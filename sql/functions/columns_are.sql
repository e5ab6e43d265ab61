-- pgcdc._columns_are(table_id, columns): true while the columns of the attached table that its
-- sync reads (pgcdc._kept) are `columns` ('attnum:name:type oid:typmod', in attnum order); else it raises
-- undefined_column. Every query that reads an attached table's rows holds it as a condition
-- (pgcdc/source/columns.py `unchanged`): evaluated once in the query's snapshot, it fails a read
-- that a column change overtook, so rows of the new shape never land under the old one. It fails
-- a read that a rewrite of the table overtook too (ALTER TABLE retyping a column, TRUNCATE; VACUUM
-- FULL, which keeps the rows, fails it as well: the read is tried again): those two are not
-- MVCC-safe, and a snapshot taken before one sees the table empty. pg_class
-- as of the query's snapshot then names the old file, the catalog as it is now
-- (pg_relation_filenode, the lock the query holds taken) the new one.
-- Touches: nothing (reads pgcdc.attached, pg_attribute and pg_class).
create or replace function pgcdc._columns_are(p_table_id int, p_columns text[])
returns boolean
language plpgsql
stable
set search_path = pg_catalog, pg_temp
as $fn$
declare
    v_now text[];
    v_name text;
    v_rewritten text;
begin
    select array_agg(format('%s:%s:%s:%s', a.attnum, a.attname, a.atttypid::int, a.atttypmod) order by a.attnum),
           min(s.table_name)
      into v_now, v_name
      from pgcdc.attached s join pg_attribute a on a.attrelid = s.relid
     where s.table_id = p_table_id and a.attnum > 0 and not a.attisdropped
       and pgcdc._kept(s.column_mode, s.column_attnums, s.column_names, s.key_attnums, a.attnum, a.attname);
    if v_now is distinct from p_columns then
        raise exception using errcode = 'undefined_column',
            message = format('pgcdc: the columns of %s changed while it was read', coalesce(v_name, p_table_id::text));
    end if;
    select min(c.relname) into v_rewritten
      from pgcdc.attached s join pg_class c on c.oid = s.relid or c.oid = any(s.members)
     where s.table_id = p_table_id and c.relkind in ('r', 'm')
       and c.relfilenode is distinct from pg_relation_filenode(c.oid);
    if v_rewritten is not null then
        raise exception using errcode = 'undefined_column',
            message = format('pgcdc: %s was rewritten while it was read (%s), and a snapshot older than a rewrite '
                             'may see no rows', coalesce(v_name, p_table_id::text), v_rewritten);
    end if;
    return true;
end
$fn$;
