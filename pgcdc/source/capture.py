"""Capture administration: install/upgrade/uninstall the pgcdc schema, attach and detach tables.

The logic lives in SQL (sql/, shipped as package data pgcdc.sql) so any client can
call it; this module runs the files, checks the schema version and turns SQL errors
into PgcdcErrors that name the object and the next step.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from importlib import resources

import psycopg

from pgcdc.errors import SchemaError, TableError, TargetError

SCHEMA_VERSION = 18  # bump with every change to sql/; install upgrades older schemas in place
LOCK_TIMEOUT = "5s"  # how long install/attach/detach wait for a lock before they give up, naming its holder


def _lock(conn: psycopg.Connection) -> None:
    """In the current transaction: wait at most LOCK_TIMEOUT for any lock (an application's long
    transaction on a table being attached must not queue its writers behind us), and exclude other
    installs/attaches/detaches. The lock is a table lock on pgcdc.meta only pgcdc's admin roles can
    take (a reader may read meta; that does not conflict); advisory keys anyone could hold."""
    conn.execute(f"set local lock_timeout = '{LOCK_TIMEOUT}'")
    if conn.execute("select to_regclass('pgcdc.meta')").fetchone()[0] is not None:
        conn.execute("lock table pgcdc.meta in share row exclusive mode")


def lock_holders(conn: psycopg.Connection, tables: list[str]) -> str:
    """Who holds locks on these relations (pgcdc's and the table at hand), for a lock-timeout message:
    "pid 123 (role app, application_name psql, idle in transaction since 2m)"."""
    rows = conn.execute(
        "select distinct a.pid, a.usename, coalesce(nullif(a.application_name, ''), '?'), coalesce(a.state, '?'), "
        "  coalesce(date_trunc('second', now() - a.xact_start)::text, '?') "
        "from pg_locks l join pg_stat_activity a on a.pid = l.pid "
        "where l.granted and l.pid <> pg_backend_pid() and l.relation = any("
        "  select to_regclass(n)::oid from unnest(%s::text[]) n where to_regclass(n) is not null) "
        "order by 1 limit 3", (tables + ["pgcdc.meta", "pgcdc.attached", "pgcdc.consumer_state", "pgcdc.commit_queue"],)
    ).fetchall()
    if not rows:
        return "no holder left (it finished meanwhile); run the command again"
    return "; ".join(f"pid {pid} (role {role}, application_name {app}, {state}, in a transaction for {since})"
                     for pid, role, app, state, since in rows)


def _timed_out(conn: psycopg.Connection, what: str, tables: list[str]) -> SchemaError:
    return SchemaError(f"{what} waited {LOCK_TIMEOUT} for a lock and gave up, changing nothing; held by "
                       f"{lock_holders(conn, tables)}: end that transaction (or wait for it) and run it again")


@dataclass(frozen=True)
class AttachedTable:
    """One attached table as recorded in pgcdc.attached."""

    table_id: int
    name: str
    key_columns: list[str]
    key_types: list[str]
    predicate: str | None
    shard: int | None
    into: str | None = None  # a fan-in's name: the Delta table its rows land in, under `shard`
    delta_partition_by: str | None = None  # the column its Delta table is partitioned by (attach --delta-partition-by)
    column_mode: str | None = None  # "only" (attach --columns) or "except" (--exclude-columns); None: every column
    # the columns --columns keeps or --exclude-columns leaves out (as they are named now; with
    # --exclude-columns, then the names the table lacks yet, which stay out if a column comes by them)
    chosen: list[str] | None = None

    @property
    def choice(self) -> str:
        """The column choice in words: "every column", "only a, b" or "all but ssn"."""
        if self.column_mode is None:
            return "every column"
        return f"{'only' if self.column_mode == 'only' else 'all but'} {', '.join(self.chosen or [])}"

    def leaves_out(self, column: str) -> bool:
        """True if the column choice leaves this column out (its values must be in no Delta table)."""
        if self.column_mode == "except":
            return column in (self.chosen or [])
        if self.column_mode == "only":
            return column not in (self.chosen or []) and column not in self.key_columns
        return False

    @property
    def target_name(self) -> str:
        """The name its Delta table is known by: its own, or its fan-in's."""
        return self.into or self.name

    @property
    def fan_in_shard(self) -> int | None:
        """Its shard in a fan-in's Delta table (a key column there), or None for a table of its own."""
        return self.shard if self.into is not None else None


@dataclass(frozen=True)
class TableStats:
    """Capture-side health of one attached table (pgcdc.stats())."""

    table_name: str
    table_id: int
    key_columns: list[str]
    predicate: str | None
    shard: int | None
    consumers: int
    min_watermark: int | None
    events: int
    pending_events: int
    pending_keys: int
    oldest_pending: datetime | None


def sql_files() -> list[tuple[str, str]]:
    """The install list: (file name, SQL text) in order."""
    root = resources.files("pgcdc.sql")
    names = [line.strip() for line in (root / "install.txt").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    return [(name, (root / name).read_text()) for name in names]


def installed_version(conn: psycopg.Connection) -> int | None:
    """Schema version recorded in pgcdc.meta, or None if pgcdc is not installed."""
    if conn.execute("select to_regclass('pgcdc.meta')").fetchone()[0] is None:
        return None
    row = conn.execute("select value from pgcdc.meta where key = 'schema_version'").fetchone()
    return int(row[0]) if row else None


def require_schema(conn: psycopg.Connection) -> None:
    """Refuse to work against a missing or mismatched pgcdc schema."""
    version = installed_version(conn)
    db = conn.info.dbname
    if version is None:
        raise SchemaError(f"pgcdc is not installed in database {db}; run `pgcdc install`")
    if version != SCHEMA_VERSION:
        action = "run `pgcdc install` to upgrade it" if version < SCHEMA_VERSION else "upgrade the pgcdc package"
        raise SchemaError(f"database {db} has pgcdc schema version {version} but this pgcdc needs "
                          f"{SCHEMA_VERSION}; {action}")


def identity(conn: psycopg.Connection) -> str:
    """What the database's txids belong to: "<system identifier>/<database oid>". A restore
    into another cluster changes the first (txids restart), a dump restored into a new
    database of the same cluster the second; a hot standby shares its primary's."""
    try:
        return str(conn.execute("select format('%s/%s', c.system_identifier, d.oid) from pg_control_system() c, "
                                "pg_database d where d.datname = current_database()").fetchone()[0])
    except psycopg.errors.InsufficientPrivilege:
        raise TargetError("the source role may not call pg_control_system(); grant it: GRANT pg_monitor TO <role> "
                          "(or GRANT EXECUTE ON FUNCTION pg_control_system() TO <role>)") from None


def recorded_identity(conn: psycopg.Connection) -> str | None:
    """The identity the queue's txids belong to, as recorded at install (or the last reset)."""
    row = conn.execute("select value from pgcdc.meta where key = 'identity'").fetchone()
    return row[0] if row else None


def _record_identity(conn: psycopg.Connection, value: str, replace: bool = False) -> None:
    """Write the identity the queue's txids belong to (keep one already there unless `replace`)."""
    conn.execute("insert into pgcdc.meta values ('identity', %s) on conflict (key) do "
                 + ("update set value = excluded.value" if replace else "nothing"), (value,))


def restored_from(conn: psycopg.Connection) -> str | None:
    """The identity of the database this one was restored from (pg_dump/pg_restore), or None if
    the queue belongs here. An installation from before identities were recorded adopts this
    database's now."""
    recorded, current = recorded_identity(conn), identity(conn)
    if recorded is None:
        try:
            with conn.transaction():
                _record_identity(conn, current)
        except psycopg.errors.InsufficientPrivilege:  # a reader role: the next install or admin run records it
            pass
        return None
    return recorded if recorded != current else None


def check_identity(conn: psycopg.Connection) -> None:
    """Refuse a queue restored from another database: its events carry txids of another
    history, which the new database hands out again."""
    other = restored_from(conn)
    if other is not None:
        raise TargetError(f"database {conn.info.dbname} was restored from another database (pgcdc was installed in "
                          f"{other}, this is {identity(conn)}): the queued events and every stored watermark belong "
                          "to the old one; run `pgcdc reset-watermark` to clear the queue and copy the tables again")


def adopt_identity(conn: psycopg.Connection) -> int | None:
    """After a restore from another database: delete the queued events of the old history and
    record this database's identity, in one transaction; the number of events deleted, or None
    if the queue already belongs here. Events of transactions still running are not visible to
    the delete and stay; a copy taken afterwards holds everything the deleted ones changed."""
    with conn.transaction():
        _lock(conn)
        if restored_from(conn) is None:
            return None
        deleted = conn.execute("delete from pgcdc.commit_queue").rowcount
        _record_identity(conn, identity(conn), replace=True)
        # a restored dump's capture code names the old tables' oids: made anew for these
        conn.execute("select pgcdc._generate_capture(table_id) from pgcdc.attached order by table_id")
    return deleted


def install(conn: psycopg.Connection, slot_txids: int | None = None) -> tuple[int | None, int]:
    """Create or upgrade the schema in one transaction; return (previous version, new version).

    slot_txids: txids per queue slot (see docs/capture.md); consumed history is reclaimed a
    slot at a time, so it bounds how much of it the queue keeps.
    """
    try:
        return _install(conn, slot_txids)
    except psycopg.errors.LockNotAvailable:
        raise _timed_out(conn, "pgcdc install", []) from None


def _install(conn: psycopg.Connection, slot_txids: int | None) -> tuple[int | None, int]:
    with conn.transaction():
        _lock(conn)
        server = conn.info.server_version
        if server < 140000:
            raise SchemaError(f"pgcdc needs PostgreSQL 14 or later; the server of database {conn.info.dbname} is "
                              f"{server // 10000}.{server % 10000}")
        previous = installed_version(conn)
        if previous is not None and previous > SCHEMA_VERSION:
            raise SchemaError(f"database {conn.info.dbname} has pgcdc schema version {previous}, newer than this "
                              f"package's {SCHEMA_VERSION}; upgrade the pgcdc package instead")
        for name, text in sql_files():
            try:
                conn.execute(text)
            except psycopg.errors.LockNotAvailable:
                raise
            except psycopg.Error as exc:
                hint = f" ({exc.diag.message_hint})" if exc.diag.message_hint else ""
                raise SchemaError(f"installing sql/{name} failed: {exc.diag.message_primary or exc}{hint}; "
                                  "nothing was changed") from None
        if slot_txids is not None:
            if slot_txids < 1:
                raise SchemaError(f"slot_txids must be a positive number of txids, not {slot_txids}")
            conn.execute("update pgcdc.meta set value = %s where key = 'slot_txids'", (str(slot_txids),))
        conn.execute("insert into pgcdc.meta values ('schema_version', %s) "
                     "on conflict (key) do update set value = excluded.value", (str(SCHEMA_VERSION),))
        try:
            with conn.transaction():  # (a savepoint: a role without pg_control_system() records it at its first ingest)
                _record_identity(conn, identity(conn))
        except TargetError:
            pass
        # regenerate capture code of attached tables, so an upgrade reaches them (and the
        # privileges of the new code: owner pgcdc_capture, no EXECUTE for PUBLIC)
        conn.execute("select pgcdc._generate_capture(table_id) from pgcdc.attached order by table_id")
        conn.execute("select * from pgcdc.maintain()")
    return previous, SCHEMA_VERSION


def uninstall(conn: psycopg.Connection) -> list[str]:
    """Detach every table and drop the pgcdc schema with its queue; return the detached tables."""
    with conn.transaction():
        _lock(conn)
        if installed_version(conn) is None:
            return []
        names = [t.name for t in _attached(conn)]
        conn.execute("select pgcdc.detach(relid) from pgcdc.attached")
        conn.execute("drop schema pgcdc cascade")
    return names


def resolve_table(conn: psycopg.Connection, name: str) -> str:
    """The table's canonical name (schema-qualified, quoted as needed); TableError if unknown."""
    try:
        row = conn.execute("select to_regclass(%s)::oid", (name,)).fetchone()
    except psycopg.Error:
        row = (None,)
    if row[0] is None:
        raise TableError(f"table {name} not found in database {conn.info.dbname}; "
                         'check the name (schema.table; quote mixed case as "Name")')
    return str(conn.execute("select format('%%I.%%I', n.nspname, c.relname) from pg_class c "
                            "join pg_namespace n on n.oid = c.relnamespace where c.oid = %s", (row[0],)).fetchone()[0])


def _table_error(exc: psycopg.Error) -> TableError:
    diag = exc.diag
    hint = f"; {diag.message_hint}" if diag.message_hint else ""
    return TableError(f"{diag.message_primary}{hint}")


def attach(conn: psycopg.Connection, table: str, key: list[str] | None = None,
           predicate: str | None = None, shard: int | None = None, into: str | None = None,
           delta_partition_by: str | None = None, columns: list[str] | None = None,
           exclude_columns: list[str] | None = None, on_subscriber: bool = False) -> AttachedTable:
    """Start capturing `table` (idempotent: re-attaching updates the options); with `into`, as
    shard `shard` of that fan-in (docs/fan-in.md); `delta_partition_by`: a column its Delta table is
    partitioned by; `columns` / `exclude_columns`: the columns its sync reads (docs/columns.md);
    `on_subscriber`: capture fires under session_replication_role = replica too (a table a
    logical replication subscription writes). (Its options are `pgcdc attach`'s and those of the
    SQL functions pgcdc.attach and pgcdc.on_subscriber, one to one.)"""
    require_schema(conn)
    name = resolve_table(conn, table)
    try:
        with conn.transaction():
            _lock(conn)
            conn.execute("select pgcdc.attach(%s::regclass, %s, %s, %s, %s, %s, %s, %s)",
                         (name, key, predicate, shard, into, delta_partition_by, columns, exclude_columns))
            conn.execute("select pgcdc.on_subscriber(%s::regclass, %s)", (name, on_subscriber))
    except psycopg.errors.LockNotAvailable:
        raise _timed_out(conn, f"attach {name}", [name]) from None
    except psycopg.Error as exc:
        if exc.sqlstate in ("PC001", "PC002", "PC003", "PC004", "PC005", "PC006", "PC007", "42809", "42501"):
            raise _table_error(exc) from None
        raise
    return next(t for t in list_attached(conn) if t.name == name)


def detach(conn: psycopg.Connection, table: str, keep_rows: bool = False) -> bool:
    """Stop capturing `table`; False if it was not attached. A table that was dropped while
    attached (detached then by pgcdc) is acknowledged: `pgcdc status` stops naming it. A
    fan-in's source: its rows leave the fan-in at each consumer's next run, unless `keep_rows`."""
    require_schema(conn)
    try:
        name = resolve_table(conn, table)
    except TableError:
        conn.execute("select pgcdc._forget_dropped()")
        if conn.execute("select pgcdc.acknowledge_dropped(%s)", (table,)).fetchone()[0]:
            return True
        raise
    try:
        with conn.transaction():
            _lock(conn)
            done = bool(conn.execute("select pgcdc.detach(%s::regclass, %s)", (name, keep_rows)).fetchone()[0])
            conn.execute("select pgcdc.acknowledge_dropped(%s)", (name,))
            return done
    except psycopg.errors.LockNotAvailable:
        raise _timed_out(conn, f"detach {name}", [name]) from None


def grant(conn: psycopg.Connection, role: str, kind: str) -> list[str]:
    """Grant `role` what a pgcdc `reader` or `admin` needs (pgcdc.grant); the statements run."""
    require_schema(conn)
    try:
        with conn.transaction():
            _lock(conn)
            return [r[0] for r in conn.execute("select pgcdc.grant(%s::regrole, %s)", (role, kind))]
    except psycopg.errors.UndefinedObject:
        raise TableError(f"role {role} does not exist in the cluster of database {conn.info.dbname}; create it first "
                         f"(CREATE ROLE {role} LOGIN PASSWORD '...')") from None
    except psycopg.errors.InsufficientPrivilege as exc:
        raise SchemaError(f"cannot grant pgcdc's rights to {role}: {exc.diag.message_primary}; run `pgcdc grant` "
                          "as the role that installed pgcdc (or a superuser)") from None


def list_attached(conn: psycopg.Connection) -> list[AttachedTable]:
    """Attached tables, by name."""
    require_schema(conn)
    return _attached(conn)


def _attached(conn: psycopg.Connection) -> list[AttachedTable]:
    rows = conn.execute(
        "select a.table_id, format('%I.%I', n.nspname, c.relname) as name, a.key_columns, a.key_types, "
        "a.predicate, a.shard, a.into_table, a.delta_partition_by, a.column_mode, "
        "array(select t.attname::text from pg_attribute t where t.attrelid = a.relid and t.attnum > 0 "
        "      and not t.attisdropped and (t.attnum = any(a.column_attnums) or t.attname::text = any(a.column_names)) "
        "      order by t.attnum) "
        "|| array(select u.name from unnest(a.column_names) u(name) where a.column_mode = 'except' "  # (names to
        "      and not exists (select 1 from pg_attribute t where t.attrelid = a.relid and t.attnum > 0 "  # come)
        "      and not t.attisdropped and t.attname::text = u.name)) "
        "from pgcdc.attached a join pg_class c on c.oid = a.relid "
        "join pg_namespace n on n.oid = c.relnamespace order by name").fetchall()
    return [AttachedTable(*row) for row in rows]


def stats(conn: psycopg.Connection) -> list[TableStats]:
    """pgcdc.stats() for every attached table."""
    require_schema(conn)
    rows = conn.execute("select table_name, table_id, key_columns, predicate, shard, consumers, "
                        "min_watermark::text::bigint, events, pending_events, pending_keys, oldest_pending "
                        "from pgcdc.stats()").fetchall()
    return [TableStats(*row) for row in rows]


def ddl_guard(conn: psycopg.Connection) -> bool:
    """Whether the event triggers that keep capture working through DDL (pgcdc_ddl, and
    pgcdc_rewrite for rewrites that change values) are installed and enabled; a pgcdc_ddl of
    schema v8 (ALTER TABLE alone: partitions created later go unseen) does not count."""
    return bool(conn.execute("select count(*) from pg_event_trigger where evtenabled <> 'D' and (evtname = 'pgcdc_"
                             "rewrite' or evtname = 'pgcdc_ddl' and 'CREATE TABLE' = any(evttags))").fetchone()[0] == 2)


def queue_size(conn: psycopg.Connection) -> tuple[int, int]:
    """(partitions, bytes on disk) of the commit queue."""
    count, size = conn.execute(
        "select count(*), coalesce(sum(pg_total_relation_size(inhrelid)), 0) from pg_inherits "
        "where inhparent = 'pgcdc.commit_queue'::regclass").fetchone()
    return int(count), int(size)


def maintain(conn: psycopg.Connection) -> list[tuple[str, str]]:
    """Create upcoming queue partitions and drop consumed ones; return what was done."""
    require_schema(conn)
    return conn.execute("select action, partition_name from pgcdc.maintain()").fetchall()

