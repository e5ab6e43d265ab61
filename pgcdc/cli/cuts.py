"""`pgcdc cut`: the newest cut (docs/readers.md), for a person or a reader's script."""

from __future__ import annotations

import argparse

from pgcdc import errors
from pgcdc.cli.common import print_json
from pgcdc.cli.common import settings_of as _settings
from pgcdc.lake import cuts
from pgcdc.lake.paths import local_folder
from pgcdc.spark.session import get_session


def cmd_cut(args: argparse.Namespace) -> int:
    """Print the newest cut holding the tables asked for (default: every table of the consumer's
    newest pass): each Delta table's version. A local root needs no Spark."""
    settings = _settings(args)
    spark = None
    if local_folder(settings.target.root) is None:
        spark = get_session(settings.spark, target_root=settings.target.root)
    cut = cuts.newest(spark, settings.target.root, settings.consumer, args.tables or None)
    shown = cut.select(args.tables)
    if args.json:
        print_json({"consumer": cut.consumer, "cut": cut.name, "taken_at": cut.taken_at, "snapshot": cut.snapshot,
                    "tables": {n: {"path": t.path, "version": t.version, "sources": t.sources}
                               for n, t in shown.items()},
                    "left_out": cut.left_out})
        return errors.OK
    print(f"cut {cut.name} of consumer {cut.consumer}, taken {cut.taken_at} (snapshot xmin {cut.snapshot['xmin']}, "
          f"xmax {cut.snapshot['xmax']}): these tables agree as of it")
    width = max(len(n) for n in shown)
    for name, t in shown.items():
        sources = "" if t.sources == [name] else f"  (from {', '.join(t.sources)})"
        print(f"  {name:<{width}}  version {t.version:<6} {t.path}{sources}")
    for name, why in sorted(cut.left_out.items()):
        print(f"  left out: {name}: {why}")
    print("read each table at its version (Spark: .option(\"versionAsOf\", N)); docs/readers.md")
    return errors.OK
