-- pgcdc._consumer_lock_space(): the first key of every consumer's advisory lock; the second
-- is its pgcdc.consumer.consumer_id, so two consumer names never share a lock. Held by an
-- ingest for its whole run (pgcdc/ingest.py), tried by status and by _mark_lagging.
create or replace function pgcdc._consumer_lock_space()
returns int
language sql
immutable
as $$ select 1885563747 $$  -- 'pgcc'
