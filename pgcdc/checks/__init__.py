"""The checks built on the run: `pgcdc verify` (Delta against PostgreSQL, row by row) and
`pgcdc status` (capture and sync health at a glance), and what they read."""
