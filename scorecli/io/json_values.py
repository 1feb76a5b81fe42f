"""The scalar values Arrow hands back that `json` cannot write, as JSON lines output writes them:
a timestamp, date or time as its ISO text, a duration as seconds, a decimal as its text, bytes as
text, a UUID (DuckDB's `uuid`, Arrow's `arrow.uuid`) as its canonical text. The writer (`io.writers`) writes ids this way, and `scorecli eval` compares ids it reads back
from such a file with its input's this way. Imports no pyarrow; knows nothing about models.
"""

from __future__ import annotations

import datetime as dt
import decimal
import uuid
from typing import Any


def json_default(value: Any) -> Any:
    """JSON for the scalar types Arrow can hand back that `json` cannot write (`json.dumps`'
    `default`)."""
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, uuid.UUID):  # an `arrow.uuid` id: what DuckDB writes for its `uuid` type
        return str(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="backslashreplace")
    raise TypeError(f"cannot write {type(value).__name__} as JSON")
