-- pgcdc._unfit(tbl, col, key, value, why): raise the error (SQLSTATE PC006) for a value the
-- Delta column's type cannot hold exactly (see docs/types.md). The sync's reading queries call
-- it in a CASE branch only such a value reaches, so the table's sync stops naming the table,
-- column, row and fix rather than land a changed value. Returns text to be cast to the
-- column's type (never returns). Touches nothing.
create or replace function pgcdc._unfit(tbl text, col text, key text, value text, why text)
returns text
language plpgsql
volatile  -- (never folded into a constant by the planner: it raises)
set search_path = pg_catalog, pg_temp
as $$
begin
    raise exception using errcode = 'PC006',
        message = format('pgcdc: column %s of %s holds %s in the row with key %s: %s',
                         quote_ident(col), tbl, left(value, 100), key, why),
        hint = 'see docs/types.md; the other tables of the run are synced';
end
$$;
