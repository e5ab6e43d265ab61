"""What a reading session must check before it reads a table (docs/security.md).

Every row must be read, and reading must not run code someone else wrote with the reader's
rights. Sessions that read rows run with db.READER_SETTINGS (row_security off, names resolved
in pg_catalog only); this module refuses, naming the table and the fix, what those settings
cannot rule out: row-level security (which would fail the read, or hide rows from a role it
applies to) and key types whose decoding from the queue's text would call a user's function
(a cast from text to the type, a domain check).
"""

from __future__ import annotations

import psycopg

from pgcdc.errors import TableError
from pgcdc.source.capture import AttachedTable

# functions and operators an expression stored in the catalog calls (its node tree's funcid/opfuncid)
_USER_CODE = r"select exists (select 1 from regexp_matches({expr}::text, ':(funcid|opfuncid) (\d+)', 'g') m " \
             r"where m[2]::oid >= 16384)"


def check_readable(conn: psycopg.Connection, t: AttachedTable) -> None:
    """Refuse to read `t` if row-level security applies to this session's role, or if decoding
    its keys would run a function a user created."""
    rls, force, owner, superuser, bypass, user = conn.execute(
        "select c.relrowsecurity, c.relforcerowsecurity, pg_has_role(c.relowner, 'USAGE'), r.rolsuper, "
        "r.rolbypassrls, current_user from pg_class c, pg_roles r "
        "where c.oid = %s::regclass and r.rolname = current_user", (t.name,)).fetchone()
    if rls and not (superuser or bypass) and (force or not owner):
        raise TableError(f"{t.name} has row-level security, which applies to role {user}: a sync must read every "
                         f"row, not the ones a policy shows; let the role bypass it (ALTER ROLE {user} BYPASSRLS) "
                         "or sync as the table's owner (docs/security.md)")
    bad = conn.execute(
        "with k as (select a.atttypid as oid from pg_attribute a where a.attrelid = %s::regclass "
        "             and a.attname = any(%s::text[])) "
        "select format('a cast %%s to %%s (function %%s)', c.castsource::regtype, c.casttarget::regtype, "
        "              c.castfunc::regprocedure) "
        "  from pg_cast c join pg_type y on y.oid = c.casttarget "
        " where c.castfunc <> 0 and c.castfunc >= 16384 "
        "   and c.castsource in ('text'::regtype, 'varchar'::regtype, 'bpchar'::regtype) "
        "   and (c.casttarget in (select oid from k) or c.casttarget in (select typbasetype from pg_type "
        "                                                                  where oid in (select oid from k))) "
        "union all "
        "select format('the check %%s of domain %%s', d.conname, d.contypid::regtype) from pg_constraint d "
        f" where d.contypid in (select oid from k) and ({_USER_CODE.format(expr='d.conbin')})",
        (t.name, t.key_columns)).fetchall()
    if bad:
        raise TableError(f"the key of {t.name} is read back from text through {bad[0][0]}, which someone created and "
                         "would run with the sync's rights; drop it, or attach the table with another key "
                         "(--key) of a built-in type")


def readable_left_out(conn: psycopg.Connection) -> list[tuple[str, list[str]]]:
    """(table, columns) for each attached table whose column choice leaves out columns this
    session's role may still read (`pgcdc check` says so: the grant, not only the sync, should
    keep them out; docs/columns.md)."""
    rows = conn.execute(
        "select format('%I.%I', n.nspname, c.relname), array_agg(t.attname::text order by t.attnum) "
        "from pgcdc.attached a join pg_class c on c.oid = a.relid join pg_namespace n on n.oid = c.relnamespace "
        "join pg_attribute t on t.attrelid = a.relid and t.attnum > 0 and not t.attisdropped "
        "where a.column_mode is not null "
        "  and not pgcdc._kept(a.column_mode, a.column_attnums, a.column_names, a.key_attnums, t.attnum, t.attname) "
        "  and has_column_privilege(a.relid, t.attnum, 'SELECT') "
        "group by 1 order by 1").fetchall()
    return [(table, list(columns)) for table, columns in rows]
