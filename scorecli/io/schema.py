"""One schema for every window of an output, and output values JSON and Parquet can both hold.

Windows are built one at a time, so a column can be all-null (type `null`) or absent in
early windows and concrete later (an `id` that first appears at row 5,000). `merge_schema`
widens a schema only where that is lossless: `null` becomes any type, a missing column is
added; any other change of type is an `InputError`, never a conversion (an id `1` never
becomes `1.0`). Knows nothing about models or files.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from scorecli.errors import InputError


def with_metadata(schema: pa.Schema, metadata: dict[str, str]) -> pa.Schema:
    """`schema` with `metadata` (text keys and values, as scorecli's are) added to its own."""
    return schema.with_metadata((schema.metadata or {}) | {k.encode(): v.encode() for k, v in metadata.items()})


def merge_type(a: pa.DataType, b: pa.DataType, name: str) -> pa.DataType:
    """The type that holds values of both `a` and `b` unchanged; InputError if none does."""
    if a.equals(b) or pa.types.is_null(b):
        return a
    if pa.types.is_null(a):
        return b
    if pa.types.is_list(a) and pa.types.is_list(b):
        return pa.list_(merge_type(a.value_type, b.value_type, name))
    if pa.types.is_large_list(a) and pa.types.is_large_list(b):
        return pa.large_list(merge_type(a.value_type, b.value_type, name))
    if pa.types.is_struct(a) and pa.types.is_struct(b) and [f.name for f in a] == [f.name for f in b]:
        return pa.struct([pa.field(f.name, merge_type(f.type, g.type, name)) for f, g in zip(a, b)])
    raise InputError(f"{name} column changes type between rows: {a} vs {b}")


def merge_schema(old: pa.Schema, new: pa.Schema) -> pa.Schema:
    """`old` widened by `new`: types merged, new columns placed after their predecessor in `new`."""
    fields = {f.name: f for f in old}
    names = list(old.names)
    for i, f in enumerate(new):
        if f.name in fields:
            fields[f.name] = pa.field(f.name, merge_type(fields[f.name].type, f.type, f.name))
            continue
        names.insert(names.index(new[i - 1].name) + 1 if i else 0, f.name)
        fields[f.name] = f
    return pa.schema([fields[n] for n in names], metadata=old.metadata)


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """Reorder, null-fill and cast `table` to `schema` (whose types hold all of `table`'s)."""
    columns = []
    for field in schema:
        if field.name not in table.column_names:
            columns.append(pa.nulls(table.num_rows, field.type))
            continue
        col = table.column(field.name)
        if not col.type.equals(field.type):
            merge_type(field.type, col.type, field.name)  # only null -> T, never a conversion
            col = col.cast(field.type)
        columns.append(col)
    return pa.Table.from_arrays(columns, schema=schema)


def null_nonfinite(table: pa.Table, scalars: bool = True) -> tuple[pa.Table, dict[str, int]]:
    """Float values that are NaN or infinite (in floats or lists of them) become null.

    A NaN score is no score: done for list columns (scores, hidden states) in every format,
    so Parquet and JSON lines hold the same values; for scalar columns (a float id) only
    with `scalars`, for JSON, which has no NaN. Returns the table and, per column, how
    many values changed.
    """
    counts: dict[str, int] = {}
    columns = []
    for name, col in zip(table.column_names, table.columns):
        if _has_float(col.type) and (scalars or not pa.types.is_floating(col.type)):
            chunks = [_null_nonfinite(chunk) for chunk in col.chunks]
            changed = sum(n for _, n in chunks)
            if changed:
                counts[name] = changed
                col = pa.chunked_array([c for c, _ in chunks], col.type)
        columns.append(col)
    return (pa.Table.from_arrays(columns, schema=table.schema) if counts else table), counts


def _has_float(t: pa.DataType) -> bool:
    if pa.types.is_floating(t):
        return True
    return (pa.types.is_list(t) or pa.types.is_large_list(t)) and _has_float(t.value_type)


def _null_nonfinite(arr: pa.Array) -> tuple[pa.Array, int]:
    if pa.types.is_float16(arr.type):
        return _null_nonfinite_half(arr)
    if pa.types.is_floating(arr.type):
        bad = pc.invert(pc.is_finite(arr))
        n = pc.sum(bad).as_py() or 0
        return (pc.if_else(bad, pa.scalar(None, arr.type), arr) if n else arr), n
    values, n = _null_nonfinite(arr.values)
    if not n:
        return arr, 0
    cls = pa.LargeListArray if pa.types.is_large_list(arr.type) else pa.ListArray
    mask = arr.is_null() if arr.null_count else None
    return cls.from_arrays(arr.offsets, values, mask=mask), n


def _null_nonfinite_half(arr: pa.Array) -> tuple[pa.Array, int]:
    """`_null_nonfinite` of float16 values, through numpy: pyarrow 18 (and 15 to 17) has no float16
    kernel for is_finite or if_else (an input's float16 id column)."""
    values = arr.to_numpy(zero_copy_only=False)
    valid = arr.is_valid().to_numpy(zero_copy_only=False)
    bad = valid & ~np.isfinite(values)
    n = int(bad.sum())
    return (pa.array(values, arr.type, mask=~valid | bad) if n else arr), n
