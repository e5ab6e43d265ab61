-- pgcdc._take_key(): a random key of pgcdc's advisory lock space, now held by this session
-- (null if five draws were all held by other sessions): taken before the lease naming it commits.
create or replace function pgcdc._take_key()
returns int
language plpgsql
set search_path = pg_catalog, pg_temp
as $fn$
declare
    v_key int;
begin
    for attempt in 1 .. 5 loop
        v_key := 1 + floor(random() * 2147483646)::int;
        if pg_try_advisory_lock(pgcdc._lock_space(), v_key) then
            return v_key;
        end if;  -- (some other session holds that random key: draw another)
    end loop;
    return null;
end
$fn$;
