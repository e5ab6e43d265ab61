"""When a table's history (lake/history.py) follows its Delta table: at the end of the table's
turn in a pass, in the lane that applied it; a fan-in's once a pass, after every lane is done.
A fan-in's sources share one Delta table and one history: folding it after each source would
fold the same history up to once per source, seconds each, the folds taking turns."""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from pgcdc import records
from pgcdc.lake import catalog, history, shards
from pgcdc.sync.context import RunContext
from pgcdc.errors import first_line

if TYPE_CHECKING:
    from pgcdc.source.capture import AttachedTable


_log = logging.getLogger(__name__)


class Later:
    """The fan-ins' histories a pass folds once its lanes are done, by Delta path."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.tables: dict[str, AttachedTable] = {}
        self.begun: set[str] = set()  # the fan-ins a source of this pass has begun to apply

    def first(self, path: str) -> bool:
        """True for the pass's first source of the fan-in at `path` to begin: the others find
        its history behind because of this pass's own commits, which it folds after the lanes."""
        with self.lock:
            if path in self.begun:
                return False
            self.begun.add(path)
            return True

    def add(self, path: str, t: "AttachedTable") -> None:
        with self.lock:
            self.tables.setdefault(path, t)


def follow(ctx: RunContext, later: Later | None, t: "AttachedTable", path: str) -> None:
    """Bring the history of the Delta table at `path` up to it now, or, for a fan-in's source
    in a pass (`later`), once the pass's lanes are done."""
    if t.into is not None and later is not None:
        later.add(path, t)
    else:
        fold(ctx, t, path)


def catch_up_first(ctx: RunContext, later: Later | None, t: "AttachedTable", path: str) -> None:
    """Fold what a kill left the history of the Delta table at `path` without, before the table
    is committed to again (history.started_behind); a fan-in's, only by its pass's first source."""
    if t.into is not None and later is not None and not later.first(path):
        return
    if history.started_behind(ctx.spark, path):
        fold(ctx, t, path)


def fold_later(ctx: RunContext, later: Later) -> dict[str, Exception]:
    """Fold the pass's fan-in histories: the ones that failed, named "<table> (history)" (the
    next run folds them: a history behind its table keeps the table off the idle path)."""
    failed: dict[str, Exception] = {}
    for path, t in later.tables.items():
        try:
            fold(ctx, t, path)
        except Exception as exc:
            name = f"{t.target_name} (history)"
            ctx.say(f"{name}: FAILED: {first_line(exc)}", logging.ERROR, records.TableFailed(name, first_line(exc)), log=_log)
            failed[name] = exc
    return failed


def fold(ctx: RunContext, t: "AttachedTable", path: str) -> None:
    """Fold the Delta table's commits its history lacks into it."""
    keys = [*t.key_columns, shards.SHARD] if t.into is not None else t.key_columns
    name = t.target_name
    label = name if t.into is not None else t.name  # (a fan-in's history is its own, not one source's)
    # (a fan-in's history is not folded alone: other workers may fold it)
    of = history.Of(keys, ctx.landing.soft_deletes, ctx.settings.consumer, name, t.leaves_out, alone=t.into is None)
    folded = history.catch_up(ctx.spark, path, of)
    if folded is not None:
        ctx.say(folded.line(label), record=records.History(label, folded.opened, folded.closed, folded.last), log=_log)
        # (its small files, as the table's: one commit a run adds some)
        ctx.compactor.after_batches(history.history_path(path), f"{label} (history)", ctx.settings.ingest.compact_files)
    database = ctx.settings.target.database
    if database and (registered := catalog.register(ctx.spark, database, history.history_name(name),
                                                    history.history_path(path))):
        ctx.say(f"{label}: its history registered in the catalog as {registered}", log=_log)
