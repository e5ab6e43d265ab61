-- pgcdc._applied(txid, out_of_order): whether txid lies in a consumer's out-of-order set (its
-- text form "a-b,c": inclusive ranges and single txids, pgcdc/watermark.py TxidSet).
create or replace function pgcdc._applied(txid xid8, out_of_order text)
returns boolean
language sql
immutable
set search_path = pg_catalog, pg_temp
as $$
    select exists (select 1 from unnest(string_to_array(nullif(out_of_order, ''), ',')) r
                    where txid::text::bigint between split_part(r, '-', 1)::bigint
                                                 and coalesce(nullif(split_part(r, '-', 2), ''), split_part(r, '-', 1))::bigint)
$$;
