-- pgcdc._time_dependent(types): whether the text form of a value of one of these types depends
-- on DateStyle, IntervalStyle or TimeZone: a date/time type itself, or a domain, array, range,
-- multirange or composite type built on one. Capture pins those settings for such keys, so
-- the writer's session cannot change the text a key is queued as. Touches nothing.
create or replace function pgcdc._time_dependent(types oid[])
returns boolean
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
    with recursive t(oid) as (
        select u.oid from unnest(types) u(oid)
        union
        select x.oid
          from t join pg_type y on y.oid = t.oid
         cross join lateral (select y.typbasetype where y.typbasetype <> 0
                             union all select y.typelem where y.typelem <> 0
                             union all select r.rngsubtype from pg_range r where r.rngtypid = y.oid
                             union all select r.rngtypid from pg_range r where r.rngmultitypid = y.oid
                             union all select a.atttypid from pg_attribute a
                                        where y.typrelid <> 0 and a.attrelid = y.typrelid and a.attnum > 0
                                          and not a.attisdropped) x(oid))
    select exists (select 1 from t where t.oid in ('date'::regtype, 'time'::regtype, 'timetz'::regtype,
                                                   'timestamp'::regtype, 'timestamptz'::regtype,
                                                   'interval'::regtype))
$$;
