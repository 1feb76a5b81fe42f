"""pyarrow without pandas until something asks for pandas.

pyarrow imports pandas, where it is installed, the first time it asks whether a value is a
pandas object: the first `pa.array` of a Python list does, and so every run of the command
line paid pandas' import (0.3-0.5 s of a one-row run, a fifth of a run whose pairs all hit
the score cache) for objects that cannot occur there: rows come from JSON lines, Parquet and
CSV through pyarrow's own readers. `defer()`, called where `scorecli score` starts a local run
(Ray Data's driver hands pandas objects to pyarrow: not there), lets pyarrow's lazy pandas
importer (its `_pandas_api`) find no pandas on that first question; it then answers "not a
pandas object" without importing it. Whatever really needs pandas (`Table.to_pandas`,
`Table.from_pandas`) imports it as before: the importer tries again where pandas is required.
Knows nothing about rows or models.
"""

from __future__ import annotations

import sys
from importlib.abc import MetaPathFinder

PANDAS = "pandas"


class _NoPandas(MetaPathFinder):
    """A finder that answers `import pandas` (and its submodules) with ModuleNotFoundError."""

    def find_spec(self, name, path=None, target=None):
        if name == PANDAS or name.startswith(PANDAS + "."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


def defer() -> bool:
    """Let pyarrow's first pandas question find no pandas (True), unless pandas is imported
    already (False: nothing changed; where pyarrow asked before and found none, this changes
    nothing either)."""
    if PANDAS in sys.modules:
        return False
    import pyarrow as pa

    finder = _NoPandas()
    sys.meta_path.insert(0, finder)
    try:
        pa.array([0])  # pyarrow's first question, remembered: no pandas objects to look for
    finally:
        sys.meta_path.remove(finder)
        for name in [m for m in sys.modules if m == PANDAS or m.startswith(PANDAS + ".")]:
            del sys.modules[name]  # nothing half-imported is left behind
    return True
