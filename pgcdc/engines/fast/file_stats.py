"""A driver-written file's statistics, as Delta's writer collects them (checked field by field
against Delta's own MERGE in tests/test_fast_commits.py).

Delta keeps, per file, the row count and for each of the first `dataSkippingNumIndexedCols`
columns (default 32) the null count, and min/max of the orderable ones: numbers, strings
(cut to a 32-character prefix; a cut max gets a tie-breaker so it stays an upper bound),
dates and timestamps (milliseconds, the session's time zone). Booleans, binary and arrays
get a null count only. `collect` gives None where it cannot say exactly what Delta would
write (a session time zone other than UTC, a table that names its statistics columns);
Spark's writer then writes the batch.
"""

from __future__ import annotations

import json
import math
from array import array
from decimal import Decimal
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

_UTC = {"UTC", "Etc/UTC", "GMT", "Z", "+00:00", "UCT", "Etc/GMT"}
_ASCII_MAX, _UTF8_MAX = 0x7F, (0xDBFF, 0xDFFF)  # Delta's tie-breakers: U+007F, U+10FFFF


class _Inexact(Exception):
    """A value whose statistic Delta's writer would write in a way not reproduced here."""


def collect(table: "pa.Table", config: dict[str, str], time_zone: str, prefix: int) -> str | None:
    """The statistics JSON of a file holding `table` in a table with `config` (its Delta
    properties), or None (see the module docstring)."""
    if "delta.dataSkippingStatsColumns" in config or time_zone not in _UTC:
        return None
    indexed = int(config.get("delta.dataSkippingNumIndexedCols", "32"))
    names = table.column_names if indexed < 0 else table.column_names[:indexed]
    mins: list[str] = []
    maxs: list[str] = []
    nulls: list[str] = []
    try:
        for name in names:
            column = table.column(name)
            key = json.dumps(name)
            nulls.append(f"{key}:{column.null_count}")
            bounds = _bounds(column, prefix) if column.null_count < len(column) else None
            if bounds is not None:
                low, high = bounds
                mins.append(f"{key}:{low}")
                if high is not None:
                    maxs.append(f"{key}:{high}")
    except _Inexact:
        return None
    return (f'{{"numRecords":{table.num_rows},"minValues":{{{",".join(mins)}}},"maxValues":{{{",".join(maxs)}}},'
            f'"nullCount":{{{",".join(nulls)}}},"tightBounds":true}}')


def _bounds(column: "pa.ChunkedArray", prefix: int) -> tuple[str, str | None] | None:
    """Min and max of a column with a non-null value, as JSON text (max None: too long to
    cut), or None for a type Delta keeps no bounds of."""
    import pyarrow as pa
    import pyarrow.compute as pc

    t = column.type
    if pa.types.is_floating(t):
        return _float_bounds(column)
    if not (pa.types.is_integer(t) or pa.types.is_decimal(t) or pa.types.is_string(t) or pa.types.is_date32(t)
            or pa.types.is_timestamp(t)):
        return None
    if pa.types.is_timestamp(t):
        if t.unit != "us":
            raise _Inexact(t)
        micros = pc.min_max(column.cast(pa.int64()))
        return _timestamp(micros["min"].as_py(), t.tz is not None), _timestamp(micros["max"].as_py(), t.tz is not None)
    if pa.types.is_date32(t):
        days = pc.min_max(column.cast(pa.int32()))
        return f'"{_date(days["min"].as_py())}"', f'"{_date(days["max"].as_py())}"'
    low, high = (s.as_py() for s in pc.min_max(column).values())
    if pa.types.is_string(t):
        cut = truncate_max(high, prefix)
        return json.dumps(truncate_min(low, prefix)), None if cut is None else json.dumps(cut)
    return _scalar(low), _scalar(high)


def _float_bounds(column: "pa.ChunkedArray") -> tuple[str, str]:
    """Spark orders NaN above every number: the max is NaN if any value is, the min only if all are."""
    import pyarrow.compute as pc

    values = column.drop_null()
    nan = pc.is_nan(values)
    numbers = values.filter(pc.invert(nan))
    has_nan = pc.any(nan).as_py()
    if len(numbers) == 0:
        return '"NaN"', '"NaN"'
    bounds = pc.min_max(numbers)
    return _scalar(bounds["min"].as_py()), '"NaN"' if has_nan else _scalar(bounds["max"].as_py())


def _scalar(value: Any) -> str:
    """A number as Delta's statistics JSON writes it."""
    if isinstance(value, float):
        if math.isinf(value):
            return '"Infinity"' if value > 0 else '"-Infinity"'
        return json.dumps(value)
    if isinstance(value, Decimal):
        return str(value)  # (the scale kept: 12.30, not 12.3, as Java's BigDecimal prints it)
    return json.dumps(value)


def _timestamp(micros: int, zoned: bool) -> str:
    """Microseconds since the epoch, floored to milliseconds, as Delta writes a timestamp
    statistic (UTC session: 'Z' for a zoned timestamp, nothing for one without zone)."""
    millis = micros // 1000
    days, in_day = divmod(millis, 86_400_000)
    seconds, ms = divmod(in_day, 1000)
    text = f"{_date(days)}T{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}.{ms:03d}"
    return f'"{text}Z"' if zoned else f'"{text}"'


def _date(days: int) -> str:
    """Days since 1970-01-01 as Spark prints a proleptic Gregorian date: a four-digit year,
    '-' before a year <= 0 (astronomical: 1 BC is 0), '+' before one past 9999."""
    # (civil-from-days over 400-year eras, valid for every int32 day)
    z = days + 719_468
    era = z // 146_097
    doe = z - era * 146_097
    yoe = (doe - doe // 1460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    year = yoe + era * 400 + (month <= 2)
    sign = "-" if year < 0 else "+" if year > 9999 else ""
    return f"{sign}{abs(year):04d}-{month:02d}-{day:02d}"


def _units(text: str) -> "array[int]":
    """`text` as UTF-16 code units: Delta cuts strings by Java's char count."""
    return array("H", text.encode("utf-16-le"))


def _text(units: "array[int]") -> str:
    return units.tobytes().decode("utf-16-le", "surrogatepass")


def truncate_min(text: str, prefix: int) -> str:
    """The first `prefix` characters (not splitting a surrogate pair): a lower bound."""
    units = _units(text)
    if len(units) <= prefix:
        return text
    take = prefix + 1 if 0xD800 <= units[prefix - 1] <= 0xDBFF and 0xDC00 <= units[prefix] <= 0xDFFF else prefix
    return _text(units[:take])


def truncate_max(text: str, prefix: int) -> str | None:
    """An upper bound of at most ~2x`prefix` characters: the prefix extended past any
    U+10FFFF, then U+007F if the next character is below it, else U+10FFFF; None if no
    such bound fits (Delta then keeps no max)."""
    units = _units(text)
    if len(units) <= prefix:
        return text
    at = len(_units(truncate_min(text, prefix)))
    while at <= 2 * prefix:
        if at >= len(units):
            return text
        if at + 1 < len(units) and (units[at], units[at + 1]) == _UTF8_MAX:
            at += 2
        elif units[at] < _ASCII_MAX:
            return _text(units[:at]) + chr(_ASCII_MAX)
        else:
            return _text(units[:at]) + "\U0010ffff"
    return None
