-- pgcdc._kept(mode, attnums, names, key_attnums, attnum, attname): whether an attached table's
-- sync reads one of its columns (pgcdc.attached column_mode, column_attnums, column_names): the
-- key always; with 'only' the columns numbered attnums; with 'except' every column but those
-- numbered attnums or named in names; with no mode every column. The one rule: the sync's
-- column list (pgcdc/source/columns.py) and the readers' column grants (_read_grants) both ask it.
create or replace function pgcdc._kept(mode text, attnums int2[], names text[], key_attnums int2[],
                                       attnum int2, attname name)
returns boolean
language sql
immutable
set search_path = pg_catalog, pg_temp
as $$
    select case when mode is null or attnum = any(key_attnums) then true
                when mode = 'only' then attnum = any(attnums)
                else not (attnum = any(attnums) or attname::text = any(names)) end
$$;
