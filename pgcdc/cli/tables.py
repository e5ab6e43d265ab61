"""The `pgcdc` commands that change what is captured, and list it: install, uninstall, attach,
detach, grant, list (the source database only; no Spark)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from pgcdc import errors
from pgcdc.cli.common import print_json as _print_json
from pgcdc.cli.common import source_of as _source
from pgcdc.errors import ConfigError
from pgcdc.lake import shards
from pgcdc.source import capture, schemas
from pgcdc.checks.status import table_lines

if TYPE_CHECKING:
    pass


def cmd_install(args: argparse.Namespace) -> int:
    """Create or upgrade the pgcdc schema."""
    with _source(args) as conn:
        previous, version = capture.install(conn)
        db = conn.info.dbname
    if previous is None:
        print(f"installed pgcdc schema version {version} in database {db}")
    elif previous == version:
        print(f"pgcdc schema version {version} already installed in database {db}; functions refreshed")
    else:
        print(f"upgraded pgcdc schema in database {db} from version {previous} to {version}")
    print("next: pgcdc attach SCHEMA.TABLE")
    return errors.OK


def cmd_uninstall(args: argparse.Namespace) -> int:
    """Detach every table and drop the pgcdc schema."""
    if not args.yes:
        print("pgcdc: uninstall drops the pgcdc schema and its queue; re-run with --yes to confirm", file=sys.stderr)
        return errors.USAGE
    with _source(args) as conn:
        detached = capture.uninstall(conn)
        db = conn.info.dbname
    for name in detached:
        print(f"detached {name}")
    print(f"pgcdc removed from database {db}")
    return errors.OK


def cmd_attach(args: argparse.Namespace) -> int:
    """Start capturing a table, or every table of whole schemas (--schema)."""
    if bool(args.table) == bool(args.schema):
        raise ConfigError("name a table or --schema SCHEMA (not both): `pgcdc attach app.orders`, "
                          "`pgcdc attach --schema app`")
    if args.follow_new and not args.schema:
        raise ConfigError("--follow-new applies to a schema attached whole: `pgcdc attach --schema app --follow-new`")
    if args.schema:
        if args.key or args.where or args.shard is not None or args.into or args.delta_partition_by or args.columns \
                or args.on_subscriber:
            raise ConfigError("--key, --where, --shard, --into, --delta-partition-by, --columns and --on-subscriber "
                              "apply to one table; "
                              "attach such a table on its own (--exclude-columns applies to every table of a schema)")
        return _attach_schemas(args)
    with _source(args) as conn:
        t = capture.attach(conn, args.table, key=_names(args.key), predicate=args.where, shard=args.shard,
                           into=args.into, delta_partition_by=args.delta_partition_by, columns=_names(args.columns),
                           exclude_columns=_names(args.exclude_columns), on_subscriber=args.on_subscriber)
    extra = "".join([f", where {t.predicate}" if t.predicate else "", f", shard {t.shard}" if t.shard is not None else "",
                     f", Delta table partitioned by {t.delta_partition_by}" if t.delta_partition_by else "",
                     f", {t.choice} (no other column is read)" if t.column_mode else "",
                     ", captured under session_replication_role = replica too" if args.on_subscriber else ""])
    print(f"attached {t.name} (key {', '.join(t.key_columns)}{extra}); its changes are now captured")
    if t.into is not None:
        print(f"its rows land in {t.into} with {shards.SHARD} = {t.shard}, beside that fan-in's other sources")
    print("next: run `pgcdc ingest` (its first run copies the table's existing rows)")
    return errors.OK


def _names(text: str | None) -> list[str] | None:
    """A comma-separated list of column names (--key, --columns, --exclude-columns)."""
    return [c.strip() for c in text.split(",") if c.strip()] if text is not None else None


def _attach_schemas(args: argparse.Namespace) -> int:
    refused = attached = 0
    with _source(args) as conn:
        for schema in args.schema:
            done = schemas.attach_schema(conn, schema, exclude_columns=_names(args.exclude_columns),
                                         follow_new=args.follow_new)
            for t in done.attached:
                choice = f"; {t.choice}" if t.column_mode else ""
                print(f"attached {t.name} (key {', '.join(t.key_columns)}{choice})")
            for table, why in done.refused:
                print(f"refused {table}: {why}")
            missing = [c for c in _names(args.exclude_columns) or [] if c not in done.matched]
            if missing:
                print(f"note: no table of schema {done.schema} has column {', '.join(missing)} (check the spelling)")
            later = ("a table created there later is attached by itself (--follow-new)" if args.follow_new else
                     "a table created there later is named by `pgcdc status` until it is attached")
            kept_out = f"; {', '.join(done.left_out)} left out of every table of it, now and later" \
                if done.left_out else ""
            print(f"schema {done.schema}: {len(done.attached)} table(s) attached, {len(done.already)} already "
                  f"attached, {len(done.refused)} refused; {later}{kept_out}")
            refused += len(done.refused)
            attached += len(done.attached)
    if attached:
        print("next: run `pgcdc ingest` (its first run copies each new table's existing rows)")
    if refused:
        print(f"{refused} table(s) were refused: fix what each line says (or leave them out) and run "
              "`pgcdc attach --schema` again")
        return errors.ATTENTION
    return errors.OK


def cmd_grant(args: argparse.Namespace) -> int:
    """Grant a role what a pgcdc reader (ingest, status, verify) or admin needs."""
    kind = "admin" if args.admin else "reader"
    with _source(args) as conn:
        statements = capture.grant(conn, args.role, kind)
    for statement in statements:
        print(statement)
    print(f"role {args.role} may now run pgcdc as its {kind} (docs/security.md lists what it can and cannot do); "
          "tables attached later are granted to readers by attach")
    if kind == "reader":
        print(f"note: a table with row-level security needs `ALTER ROLE {args.role} BYPASSRLS` (a superuser's step)")
    return errors.OK


def cmd_detach(args: argparse.Namespace) -> int:
    """Stop capturing a table, or every table of whole schemas (--schema)."""
    if bool(args.table) == bool(args.schema):
        raise ConfigError("name a table or --schema SCHEMA (not both)")
    with _source(args) as conn:
        if args.schema:
            for schema in args.schema:
                for name in schemas.detach_schema(conn, schema):
                    print(f"detached {name}")
                print(f"schema {schema}: its tables' changes are no longer captured and new tables there are not "
                      "watched (their Delta tables stay as they are)")
            return errors.OK
        name = capture.resolve_table(conn, args.table)
        into = next((t for t in capture.list_attached(conn) if t.name == name and t.into is not None), None)
        done = capture.detach(conn, args.table, keep_rows=args.keep_rows)
    if not done:
        print(f"{name} was not attached")
    elif into is not None:
        rows = "stay" if args.keep_rows else "leave it at each consumer's next `pgcdc ingest`"
        print(f"detached {name}; its changes are no longer captured; its rows in fan-in {into.into} "
              f"({shards.SHARD} = {into.shard}) {rows}")
    else:
        print(f"detached {name}; its changes are no longer captured (its Delta tables stay as they are)")
    return errors.OK


def cmd_list(args: argparse.Namespace) -> int:
    """List attached tables with their options."""
    with _source(args) as conn:
        tables = capture.list_attached(conn)
    if args.json:
        _print_json([{"table": t.name, "key": t.key_columns, "where": t.predicate, "shard": t.shard, "into": t.into,
                      "delta_partition_by": t.delta_partition_by,
                      "columns": t.chosen if t.column_mode == "only" else None,
                      "exclude_columns": t.chosen if t.column_mode == "except" else None}
                     for t in tables])
        return errors.OK
    if not tables:
        print("no tables attached; run `pgcdc attach SCHEMA.TABLE`")
        return errors.OK
    rows = [("table", "key", "columns", "where", "shard", "into")]
    rows += [(t.name, ", ".join(t.key_columns), t.choice if t.column_mode else "all", t.predicate or "",
              "" if t.shard is None else str(t.shard), t.into or "") for t in tables]
    print("\n".join(table_lines(rows)))
    return errors.OK
