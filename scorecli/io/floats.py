"""JSON lines write float32 values with float32 digits (docs/input-output.md: Output): `0.21064267`, the shortest
text that reads back as the same float32, not the float64 digits of its widening
(`0.21064266562461853`), which claim a precision the score never had.

A float32 (or float16) column, also inside lists, becomes float64 values parsed from that
shortest text, so Python's JSON encoder writes exactly those digits. That is for what scorecli
computes (`SCORED`); a column copied from the input (the id) is written as the value the input
held: a float16 id 65504 is `65504.0`, not its shortest float16 text `65500`, which another
reader takes for another id. Knows nothing about models.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# the output columns whose values scorecli computes (io.columns); the others are the input's
SCORED = frozenset({"scores", "score", "pooled_hidden_states"})


def shortest_floats(table: pa.Table) -> pa.Table:
    """`table` with every float32/float16 column (and list of them, at any depth) as float64:
    values that print as the shortest text of the narrow value in a `SCORED` column, the narrow
    value itself (widened exactly) in another; other columns as they are."""
    for k, field in enumerate(table.schema):
        if _narrow(field.type):
            wide = _wide(field.type)
            if field.name in SCORED:
                column = pa.chunked_array([_widen(chunk) for chunk in table.column(k).chunks], wide)
            else:
                column = table.column(k).cast(wide)  # every float16 and float32 value is a float64 value
            table = table.set_column(k, field.with_type(column.type), column)
    return table


def _narrow(t: pa.DataType) -> bool:
    if pa.types.is_float32(t) or pa.types.is_float16(t):
        return True
    return (pa.types.is_list(t) or pa.types.is_large_list(t)) and _narrow(t.value_type)


def _wide(t: pa.DataType) -> pa.DataType:
    if pa.types.is_float32(t) or pa.types.is_float16(t):
        return pa.float64()
    if pa.types.is_large_list(t):
        return pa.large_list(_wide(t.value_type))
    return pa.list_(_wide(t.value_type)) if pa.types.is_list(t) else t


def _widen(array: pa.Array) -> pa.Array:
    t = array.type
    if pa.types.is_float32(t):  # Arrow prints a float32 with its shortest round-trip digits
        return pc.cast(pc.cast(array, pa.string()), pa.float64())
    if pa.types.is_float16(t):  # numpy prints a float16 with its shortest digits (Arrow with all of them)
        values = array.to_numpy(zero_copy_only=False)
        text = np.array(
            [
                repr(float(v)) if np.isnan(v) else np.format_float_positional(v, unique=True, trim="-")
                for v in values.astype(np.float16)
            ]
        )
        return pa.array(text.astype(np.float64), mask=array.is_null().to_numpy(zero_copy_only=False))
    offsets = array.offsets  # of a slice: into the whole child array
    first, last = offsets[0].as_py(), offsets[-1].as_py()
    offsets = pc.subtract(offsets, pa.scalar(first, offsets.type))
    cls = pa.LargeListArray if pa.types.is_large_list(t) else pa.ListArray
    return cls.from_arrays(offsets, _widen(array.values.slice(first, last - first)), mask=array.is_null())
