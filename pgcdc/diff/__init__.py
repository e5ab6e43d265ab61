"""Comparing a table's rows in PostgreSQL and in its Delta table by key ranges, by code of its
own (not the sync's reading), and queueing the keys that differ as changes: what `pgcdc verify`
and `repair` (pgcdc/checks/) report and do, and what a run reconciles a table by instead of
copying it (pgcdc/sync/reconcile.py)."""
