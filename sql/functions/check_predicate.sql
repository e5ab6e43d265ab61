-- pgcdc._check_predicate(tbl, predicate): check an attach predicate and return it in canonical
-- form with the columns it names. A predicate must decide a row's match from that row's values
-- alone, or capture (which sees only the rows a statement writes) would miss rows that start or
-- stop matching: it may call only built-in immutable functions and operators, read no other
-- table and hold no subquery (refused with PC003, naming why). That also keeps capture code,
-- which evaluates it, from reaching any function a user wrote (docs/security.md).
-- How: the predicate becomes a CHECK constraint of an empty temporary copy of the table's
-- columns (PostgreSQL refuses subqueries there and records what the expression depends on),
-- and is printed back from the catalog (one expression, names qualified where needed).
-- Touches: a temporary table, dropped before it returns.
create or replace function pgcdc._check_predicate(tbl regclass, predicate text,
                                                  out normalized text, out columns text[])
language plpgsql
set search_path = pg_catalog, pg_temp
as $fn$
declare
    v_tmp regclass;
    v_con oid;
    v_bad text;
begin
    if position(';' in predicate) > 0 or predicate ~ '(--|/\*)' then
        raise exception using errcode = 'PC003', message = format('predicate for %s must be one SQL expression', tbl),
            hint = 'no semicolons or comments';
    end if;
    execute format('create temporary table pgcdc_predicate (like %s) on commit drop', tbl);
    v_tmp := 'pg_temp.pgcdc_predicate'::regclass;
    begin
        execute format('alter table pg_temp.pgcdc_predicate add constraint pgcdc_predicate check (%s) not valid',
                       predicate);
    exception when others then
        execute 'drop table pg_temp.pgcdc_predicate';
        raise exception using errcode = 'PC003',
            message = format('predicate for %s is not a boolean expression on its columns alone: %s', tbl, sqlerrm),
            hint = 'use the table''s column names unqualified, built-in immutable functions and operators, '
                   'no subqueries';
    end;
    select c.oid, pg_get_expr(c.conbin, c.conrelid) into v_con, normalized
      from pg_constraint c where c.conrelid = v_tmp and c.conname = 'pgcdc_predicate';
    -- functions and operators: read from the stored expression itself (pg_depend leaves out
    -- built-in objects, whose volatility matters too)
    select string_agg(what, ', ') into v_bad from (
        select distinct format('%s %s (%s)', case when f.kind = 'o' then 'operator' else 'function' end,
                               case when f.kind = 'o' then f.id::regoperator::text else f.id::regprocedure::text end,
                               case when f.id >= 16384 or p.oid >= 16384 then 'not built in' else 'not immutable' end)
               as what
          from pg_constraint c
         cross join lateral (select 'f', m[2]::oid from regexp_matches(c.conbin::text, ':(funcid|opfuncid) (\d+)', 'g') m
                             union all
                             select 'o', m[1]::oid from regexp_matches(c.conbin::text, ':opno (\d+)', 'g') m) f(kind, id)
          join pg_proc p on p.oid = case when f.kind = 'o' then (select o.oprcode::oid from pg_operator o where o.oid = f.id)
                                         else f.id end
         where c.oid = v_con and f.id <> 0 and (f.id >= 16384 or p.oid >= 16384 or p.provolatile <> 'i')
        union all
        select format('type %s (a user-defined type other than an enum)', t.oid::regtype)
          from pg_depend d join pg_type t on t.oid = d.refobjid
         where d.classid = 'pg_constraint'::regclass and d.objid = v_con and d.refclassid = 'pg_type'::regclass
           and t.oid >= 16384 and t.typtype <> 'e'
        union all
        select format('%s (another relation)', r.oid::regclass)
          from pg_depend d join pg_class r on r.oid = d.refobjid
         where d.classid = 'pg_constraint'::regclass and d.objid = v_con and d.refclassid = 'pg_class'::regclass
           and r.oid <> v_tmp) x;
    select array_agg(a.attname::text order by a.attnum) into columns
      from pg_depend d join pg_attribute a on a.attrelid = d.refobjid and a.attnum = d.refobjsubid
     where d.classid = 'pg_constraint'::regclass and d.objid = v_con and d.refobjid = v_tmp and d.refobjsubid > 0;
    execute 'drop table pg_temp.pgcdc_predicate';
    if v_bad is not null then
        raise exception using errcode = 'PC003',
            message = format('predicate for %s uses %s: a row''s match must follow from its own values alone, or '
                             'changes that make rows start or stop matching are missed', tbl, v_bad),
            hint = 'use built-in immutable functions and operators on the table''s columns only';
    end if;
end
$fn$;
