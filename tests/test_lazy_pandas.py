"""A local `scorecli score` imports no pandas (`scorecli.io.lazy_pandas`): pyarrow would import it
on its first `pa.array` to ask whether a value is a pandas object, 0.3-0.5 s of every run; what
really needs pandas still gets it."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from tests.test_cli import jsonl, write
from tests.test_score_cache import hooked

pytestmark = pytest.mark.skipif(importlib.util.find_spec("pandas") is None, reason="pandas is not installed")

DEFERRED = """
import sys
from scorecli.io.lazy_pandas import defer
assert defer()
import pyarrow as pa
table = pa.table({"a": [1, 2], "b": ["x", None], "c": [[0.5], []]})
assert pa.array([{"k": 1.5}]).type == pa.struct([("k", pa.float64())])
assert "pandas" not in sys.modules, "pyarrow imported pandas"
frame = table.to_pandas()  # what needs pandas imports it
assert frame["a"].tolist() == [1, 2]
import pandas as pd
# and pyarrow knows pandas' objects again: a Categorical is a dictionary array, not strings
assert pa.types.is_dictionary(pa.array(pd.Categorical(["a", "b", "a"])).type)
assert not defer()  # pandas imported: nothing to put off
print("ok")
"""


def test_pandas_is_put_off_until_something_needs_it():
    proc = subprocess.run([sys.executable, "-c", DEFERRED], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


@pytest.mark.e2e
def test_a_local_run_imports_no_pandas(qwen3_seq_cls, tmp_path):
    """A whole run (read JSON lines, self-check, score, write Parquet) exits 3 through the hook
    if pandas was imported; its output is as usual."""
    inp = write(tmp_path / "in.jsonl", jsonl([{"query": "a question", "items": ["an answer", "another"]}]))
    out = tmp_path / "out.parquet"
    result = hooked("not-imported:pandas", ["score", str(inp), "--model", qwen3_seq_cls, "--out", str(out)])
    assert result.rc == 0, result.stderr
    assert len(pq.read_table(out)["scores"][0].as_py()) == 2
