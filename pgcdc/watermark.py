"""A consumer's state for one table: (watermark, out_of_order), as committed with batch `batch`.

Every event with txid < watermark is applied, and so are the events of the txids in
out_of_order (all >= watermark). This is the value alone: the Delta side keeps it in the
commit that applied it (`pgcdc.lake.state`), the PostgreSQL side mirrors it
(`pgcdc.source.mirror`) and the queue is planned from it (`pgcdc.source.events`).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field, replace

STATE_FORMAT = 1


@dataclass(frozen=True)
class TxidSet:
    """A set of txids stored as sorted, disjoint, inclusive ranges: compact while a long
    transaction holds the watermark back and many others commit above it."""

    ranges: tuple[tuple[int, int], ...] = ()

    @classmethod
    def of(cls, ranges: list[tuple[int, int]] | tuple[tuple[int, int], ...]) -> "TxidSet":
        merged: list[tuple[int, int]] = []
        for lo, hi in sorted(ranges):
            if merged and lo <= merged[-1][1] + 1:
                merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
            else:
                merged.append((lo, hi))
        return cls(tuple(merged))

    def __contains__(self, txid: int) -> bool:
        return any(lo <= txid <= hi for lo, hi in self.ranges)

    def __len__(self) -> int:
        return sum(hi - lo + 1 for lo, hi in self.ranges)

    def union(self, other: "TxidSet") -> "TxidSet":
        return TxidSet.of(self.ranges + other.ranges)

    def at_or_above(self, txid: int) -> "TxidSet":
        """The part of the set at or above txid (what is still needed once the watermark reaches it)."""
        return TxidSet(tuple((max(lo, txid), hi) for lo, hi in self.ranges if hi >= txid))

    def encode(self) -> str:
        return ",".join(f"{lo}" if lo == hi else f"{lo}-{hi}" for lo, hi in self.ranges)

    @classmethod
    def decode(cls, text: str) -> "TxidSet":
        ranges = []
        for part in filter(None, text.split(",")):
            lo, _, hi = part.partition("-")
            ranges.append((int(lo), int(hi or lo)))
        return cls.of(ranges)


@dataclass(frozen=True)
class CopyProgress:
    """A copy in chunks that has not ended (sync/chunked_copy.py): where its next chunk starts (`after`:
    the JSON of the first key not copied yet, null before the first chunk), how far it got,
    the rows the table was estimated to hold (0: unknown), when it began (epoch seconds), and
    whether its chunks append (`append`: the Delta table, a fan-in source's shard of it, held no
    row when the copy began, so none lies at or above `after`; else each replaces its range)."""

    after: str | None
    chunks: int = 0
    rows: int = 0
    total: int = 0
    started: float = 0.0
    append: bool = False

    def encode(self) -> dict[str, object]:
        encoded: dict[str, object] = {"after": self.after, "chunks": self.chunks, "rows": self.rows,
                                      "total": self.total, "started": self.started}
        if self.append:  # (a state without it replaces its chunks' ranges: what older pgcdc did)
            encoded["append"] = True
        return encoded

    @classmethod
    def decode(cls, d: dict[str, object] | None) -> "CopyProgress | None":
        if d is None:
            return None
        return cls(None if d.get("after") is None else str(d["after"]), int(str(d.get("chunks", 0))),
                   int(str(d.get("rows", 0))), int(str(d.get("total", 0))), float(str(d.get("started", 0.0))),
                   d.get("append") is True)


@dataclass(frozen=True)
class ConsumerState:
    """The state of one consumer for one table, as committed with batch number `batch`."""

    consumer: str
    table: str
    table_id: int
    system_id: str
    watermark: int
    out_of_order: TxidSet = field(default_factory=TxidSet)
    batch: int = 0
    run_id: str = ""
    columns: str = ""  # the fingerprint of the source columns its Delta table was last checked against ("": unknown)
    shard: int | None = None  # a fan-in source's shard: its rows in the Delta table, and its state there
    copy: CopyProgress | None = None  # a copy in chunks under way: no batch applies before it ends
    version: int | None = None  # the Delta version whose commit holds this state (None: not known yet)

    @property
    def key(self) -> str:
        """What its state is known by in its Delta table (lake/state.py): the consumer, or in a
        fan-in's Delta table, the consumer's state of one shard."""
        return state_key(self.consumer, self.shard)

    def next(self, watermark: int, applied_above: TxidSet) -> "ConsumerState":
        """The state after one more batch: the watermark only ever moves up."""
        wm = max(self.watermark, watermark)
        ooo = self.out_of_order.union(applied_above).at_or_above(wm)
        while ooo.ranges and ooo.ranges[0][0] == wm:  # the watermark swallows a range that starts at it
            wm = ooo.ranges[0][1] + 1
            ooo = ooo.at_or_above(wm)
        return replace(self, watermark=wm, out_of_order=ooo, batch=self.batch + 1, run_id=uuid.uuid4().hex,
                       version=None)

    def chunk(self, copy: CopyProgress | None) -> "ConsumerState":
        """The state committed with one more chunk of a copy (`copy`: its progress, None once the
        last chunk is in): the same watermark, the next batch number."""
        return replace(self, batch=self.batch + 1, run_id=uuid.uuid4().hex, copy=copy, version=None)

    def wound_back(self, then: "ConsumerState") -> "ConsumerState":
        """The state committed after a restore to an earlier point: `then`'s watermark (the state the
        restored database recorded), the next batch number (checks/rewind.py)."""
        return replace(self, watermark=then.watermark, out_of_order=then.out_of_order, batch=self.batch + 1,
                       run_id=uuid.uuid4().hex, version=None)

    def passed(self, watermark: int, applied_above: "TxidSet | None" = None) -> "ConsumerState":
        """The state once a batch without events is passed (nothing committed to Delta): the same
        batch number and run; only the watermark may move up."""
        moved = self.next(watermark, applied_above or TxidSet())
        return replace(moved, batch=self.batch, run_id=self.run_id, version=self.version)

    def to_json(self) -> str:
        return json.dumps({"pgcdc_state": STATE_FORMAT, "consumer": self.consumer, "table": self.table,
                           "table_id": self.table_id, "system_id": self.system_id, "watermark": self.watermark,
                           "out_of_order": self.out_of_order.encode(), "batch": self.batch, "run_id": self.run_id,
                           "columns": self.columns, **({} if self.shard is None else {"shard": self.shard}),
                           **({} if self.copy is None else {"copy": self.copy.encode()}),
                           **({} if self.version is None else {"version": self.version})},
                          sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "ConsumerState | None":
        """Parse a state; None if the text is not a pgcdc state (someone else's userMetadata)."""
        try:
            d = json.loads(text)
        except (TypeError, ValueError):
            return None
        if not isinstance(d, dict) or d.get("pgcdc_state") != STATE_FORMAT:
            return None
        return cls(consumer=d["consumer"], table=d["table"], table_id=int(d["table_id"]), system_id=d["system_id"],
                   watermark=int(d["watermark"]), out_of_order=TxidSet.decode(d["out_of_order"]),
                   batch=int(d["batch"]), run_id=d.get("run_id", ""), columns=d.get("columns", ""),
                   shard=None if d.get("shard") is None else int(d["shard"]), copy=CopyProgress.decode(d.get("copy")),
                   version=None if d.get("version") is None else int(d["version"]))


def state_key(consumer: str, shard: int | None) -> str:
    """The name a consumer's state goes by in a Delta table: the consumer's, or for a fan-in
    source, "<consumer>@<shard>" (consumer names hold no "@", settings.py)."""
    return consumer if shard is None else f"{consumer}@{shard}"
