"""Nanosecond timestamps, times and durations, whose values Python's `datetime` cannot hold.

pandas writes its datetimes as `timestamp[ns]`, polars its times as `time64[ns]`. pyarrow hands
such a value to Python as a `datetime` only when it is a whole number of microseconds; otherwise
it raises (without pandas, as a command-line run is: `io.lazy_pandas`) or, for a time, drops the
nanoseconds (with pandas). So a column whose values are not all whole microseconds is read as
its integer nanoseconds (`exact_nanos`; `pa.array(ints, type=...)` rebuilds the values exactly,
as `io.ids.id_array` does for an id), and written to JSON lines as text with nine digits after
the second (`nanos_as_json`; a duration as seconds). Nanoseconds inside lists, structs and maps
(columns that are no field scorecli reads) are read as integers whatever they are. Other columns,
and the columns of nanoseconds that are whole microseconds, are left as they are. Knows nothing
about models.
"""

from __future__ import annotations

import datetime as dt

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_NS = 1000  # nanoseconds in a microsecond


def of_nanos(t: pa.DataType) -> bool:
    """Whether `t` is a timestamp, time or duration in nanoseconds."""
    temporal = pa.types.is_timestamp(t) or pa.types.is_time64(t) or pa.types.is_duration(t)
    return temporal and t.unit == "ns"


def _sub_micro(column: pa.Array | pa.ChunkedArray) -> bool:
    """Whether `column` is of nanoseconds and some value in it is not a whole microsecond."""
    if not of_nanos(column.type) or column.null_count == len(column):
        return False
    values = column.cast(pa.int64()).fill_null(0).to_numpy()
    return bool(np.any(values % _NS))


def exact_nanos(batch: pa.RecordBatch | pa.Table) -> pa.RecordBatch | pa.Table:
    """`batch` with each column of nanoseconds that are not all whole microseconds as its int64
    values, which `to_pylist` hands over exactly."""
    columns = list(batch.columns)
    changed = False
    for k, column in enumerate(columns):
        wanted = pa.int64() if _sub_micro(column) else _nested_ints(column.type)
        if not wanted.equals(column.type):
            columns[k], changed = column.cast(wanted), True
    return type(batch).from_arrays(columns, names=batch.schema.names) if changed else batch


def _nested_ints(t: pa.DataType) -> pa.DataType:
    """`t` with int64 for the nanosecond types inside a list, struct or map (a column that is no
    field scorecli reads: fields are strings, ids scalars): their values, whatever they are, as
    Python can hold them."""
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        inner = _inner(t.value_type)
        if pa.types.is_fixed_size_list(t):
            return pa.list_(inner, t.list_size)
        return pa.large_list(inner) if pa.types.is_large_list(t) else pa.list_(inner)
    if pa.types.is_map(t):
        return pa.map_(_inner(t.key_type), _inner(t.item_type))
    if pa.types.is_struct(t):
        return pa.struct([t.field(k).with_type(_inner(t.field(k).type)) for k in range(t.num_fields)])
    return t


def _inner(t: pa.DataType) -> pa.DataType:
    return pa.int64() if of_nanos(t) else _nested_ints(t)


def nanos_as_json(table: pa.Table) -> pa.Table:
    """`table` with each column of nanoseconds that are not all whole microseconds as the values
    JSON lines write (`json_values`' forms, nine digits after the second): a timestamp or time as
    ISO text (`2023-11-14T22:13:20.123456789`), a duration as float seconds."""
    for k, field in enumerate(table.schema):
        column = table.column(k)
        if not _sub_micro(column):
            continue
        if pa.types.is_duration(field.type):
            values = pc.divide(column.cast(pa.int64()).cast(pa.float64()), 1e9)  # as `total_seconds()`
        else:
            values = pa.array([None if v is None else _iso(v, field.type) for v in column.cast(pa.int64()).to_pylist()])
        table = table.set_column(k, field.with_type(values.type), values)
    return table


def nanos_json(ns: int, t: pa.DataType) -> str | float:
    """One value of nanoseconds of type `t`, read as its integer (`exact_nanos`), as JSON lines
    write it (`nanos_as_json`): ISO text, a duration's float seconds."""
    return ns / 1e9 if pa.types.is_duration(t) else _iso(ns, t)


def _iso(ns: int, t: pa.DataType) -> str:
    """The ISO text of `ns` nanoseconds of type `t` (a timestamp, in its zone, or a time)."""
    micros, rest = divmod(ns, _NS)
    unit = pa.timestamp("us", t.tz) if pa.types.is_timestamp(t) else pa.time64("us")
    value: dt.datetime | dt.time = pa.array([micros], pa.int64()).cast(unit)[0].as_py()
    text = value.isoformat()
    plain = len(value.replace(tzinfo=None).isoformat())  # the zone's offset follows
    head, zone = text[:plain], text[plain:]
    if not rest:
        return text
    return f"{head if '.' in head else head + '.000000'}{rest:03d}{zone}"
