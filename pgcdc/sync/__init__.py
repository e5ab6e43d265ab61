"""A run: what a table needs (`plan`), doing it for one table (`ingest`), copies whole
(`copies`) or in chunks (`chunked_copy`), the pass's consistent cut (`pass_cut`), history
folds (`history_folds`), the loop over a consumer's tables (`runs`), the follower and
compaction.

It joins `pgcdc.source` (PostgreSQL) and `pgcdc.lake` (Delta) through `pgcdc.engines`;
`pgcdc.checks` (verify, status) and the CLI (`pgcdc.cli`) are above it.
"""
