-- pgcdc._own_capture(fn): hand a generated capture function to the NOLOGIN role pgcdc_capture,
-- which may do nothing but insert into the queue (docs/security.md): whatever a capture function
-- might reach runs with that right alone. ALTER ... OWNER needs the new owner to have CREATE on
-- the schema: granted for the moment of the change and revoked at once.
-- Touches: the function's owner.
create or replace function pgcdc._own_capture(fn regprocedure)
returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $fn$
begin
    if (select proowner from pg_proc where oid = fn) = (select oid from pg_roles where rolname = 'pgcdc_capture') then
        return;
    end if;
    grant create on schema pgcdc to pgcdc_capture;
    execute format('alter function %s owner to pgcdc_capture', fn);
    revoke create on schema pgcdc from pgcdc_capture;
end
$fn$;
