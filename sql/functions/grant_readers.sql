-- pgcdc._grant_readers(table_id): grant every reader role `pgcdc grant` made what _read_grants
-- says for the attached table (attach; DDL that adds a column a column choice keeps).
create or replace function pgcdc._grant_readers(p_table_id int)
returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $fn$
declare
    v_role regrole;
    v_stmt text;
    v_rel regclass;
    v_schema name;
begin
    select a.relid, n.nspname into v_rel, v_schema from pgcdc.attached a join pg_class c on c.oid = a.relid
      join pg_namespace n on n.oid = c.relnamespace where a.table_id = p_table_id;
    for v_role in select to_regrole(g.role_name) from pgcdc.grantee g
                   where g.kind = 'reader' and to_regrole(g.role_name) is not null
    loop
        execute format('grant usage on schema %I to %s', v_schema, v_role);
        foreach v_stmt in array pgcdc._read_grants(v_rel, v_role) loop
            execute v_stmt;
        end loop;
    end loop;
end
$fn$;
