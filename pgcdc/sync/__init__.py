"""A run: what a table needs (`plan`), doing it for one table (`ingest`), the loop over a
consumer's tables (`runs`), the follower, compaction, verify and status.

It joins `pgcdc.source` (PostgreSQL) and `pgcdc.lake` (Delta) through `pgcdc.engines`;
the CLI (`pgcdc.cli`) is the only package above it.
"""
