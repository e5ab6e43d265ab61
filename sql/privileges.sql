-- Privileges (docs/security.md): nothing in schema pgcdc is reachable by PUBLIC; capture
-- functions run as pgcdc_capture, a NOLOGIN role that may do nothing but insert into the queue.
-- Run last by install, after every function exists. Creating pgcdc_capture needs CREATEROLE
-- (or a superuser) once; a DBA may create it beforehand instead.
do $roles$
declare
    r pg_roles;
begin
    select * into r from pg_roles where rolname = 'pgcdc_capture';
    if r.oid is null then
        begin
            create role pgcdc_capture nologin;
        exception when insufficient_privilege then
            raise exception using errcode = '42501',
                message = 'pgcdc install must create the NOLOGIN role pgcdc_capture, which owns the capture code, '
                          'and this role may not create roles',
                hint = format('install as a superuser or a role with CREATEROLE, or have a DBA run: CREATE ROLE '
                              'pgcdc_capture NOLOGIN; GRANT pgcdc_capture TO %I;', current_user);
        end;
    elsif r.rolcanlogin or r.rolsuper or r.rolcreaterole or r.rolcreatedb or r.rolreplication or r.rolbypassrls
          or exists (select 1 from pg_auth_members m where m.member = r.oid) then
        raise exception using errcode = '42501',
            message = 'role pgcdc_capture exists with rights pgcdc will not hand to its capture code (LOGIN, '
                      'SUPERUSER, CREATEROLE, CREATEDB, REPLICATION, BYPASSRLS or membership in another role)',
            hint = 'make it a bare NOLOGIN role: ALTER ROLE pgcdc_capture NOLOGIN NOSUPERUSER NOCREATEROLE '
                   'NOCREATEDB NOREPLICATION NOBYPASSRLS, and revoke its memberships';
    end if;
    if not pg_has_role(current_user, 'pgcdc_capture', 'MEMBER') then
        -- (pgcdc_capture is cluster-wide: installed in another database first, by another role,
        -- it can be granted here only by a role with its ADMIN OPTION)
        begin
            execute format('grant pgcdc_capture to %I', current_user);
        exception when insufficient_privilege then
            raise exception using errcode = '42501',
                message = format('pgcdc install needs role %I to be a member of pgcdc_capture (the cluster-wide '
                                 'NOLOGIN role that owns the capture code; it exists already, made by another '
                                 'install in this cluster), and %I may not grant it', current_user, current_user),
                hint = format('have a superuser (or a role with ADMIN OPTION on pgcdc_capture) run: GRANT '
                              'pgcdc_capture TO %I; then run pgcdc install again', current_user);
        end;
    end if;
end
$roles$;

revoke all on schema pgcdc from public;
revoke all on all tables in schema pgcdc from public;
revoke all on all sequences in schema pgcdc from public;
revoke all on all functions in schema pgcdc from public;
alter default privileges in schema pgcdc revoke execute on functions from public;

-- pgcdc_capture: insert events, nothing else (not even SELECT)
revoke all on all tables in schema pgcdc from pgcdc_capture;
grant usage on schema pgcdc to pgcdc_capture;
grant insert on pgcdc.commit_queue to pgcdc_capture;
