"""The command line loads models without scipy, scikit-learn and boto3
(`scorecli.model.lean_imports`): transformers' shared model code imports them only for training
losses, generation and (through accelerate) SageMaker, 0.3 s of a one-row run under transformers
5.24, 0.8 s under 5.17; what needs them still finds them."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from tests.test_cli import jsonl, write
from tests.test_score_cache import hooked

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("scipy") is None, reason="scipy is not installed: nothing to leave out"
)


def run(code: str, cwd=None) -> str:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


HIDDEN = """
import sys
from scorecli.model import lean_imports
lean_imports.skip_unneeded()
assert lean_imports.import_model_code()
import transformers.modeling_utils
assert "scipy" not in sys.modules and "sklearn" not in sys.modules, "imported while hidden"
assert all(sys.modules.get(name, 0) is not None for name in lean_imports.UNNEEDED), "left hidden"
from transformers.utils import import_utils
assert import_utils.is_scipy_available(), "the availability check still says no"
import scipy.optimize  # what needs it finds it
assert not lean_imports.import_model_code()  # imported already
print("ok")
"""


def test_model_code_imports_without_scipy_and_finds_it_after():
    assert run(HIDDEN) == "ok"


def test_only_when_asked():
    """A library caller's process may train or generate later: nothing is left out there."""
    code = (
        "import sys; from scorecli.model import lean_imports\n"
        "assert not lean_imports.import_model_code()\n"
        "print('transformers.modeling_utils' in sys.modules)"
    )
    assert run(code) == "False"


def test_model_code_that_needs_scipy_imports_it_unhidden(tmp_path):
    """A transformers release that imports scipy unconditionally: imported again, unhidden; a
    module missing for another reason still raises."""
    (tmp_path / "needs_scipy.py").write_text("import scipy.optimize\nVALUE = 1\n")
    (tmp_path / "needs_missing.py").write_text("import no_such_package_anywhere\n")
    code = (
        "import sys; sys.path.insert(0, '.')\n"
        "from scorecli.model import lean_imports\n"
        "lean_imports.skip_unneeded()\n"
        "assert not lean_imports.import_model_code(('needs_scipy',))\n"
        "import needs_scipy; assert needs_scipy.VALUE == 1 and 'scipy' in sys.modules\n"
        "try:\n"
        "    lean_imports.import_model_code(('needs_missing',))\n"
        "except ModuleNotFoundError as exc:\n"
        "    print(exc.name)\n"
    )
    assert run(code, cwd=tmp_path) == "no_such_package_anywhere"


@pytest.mark.e2e
def test_a_local_run_imports_neither(bert_cross_encoder, tmp_path):
    """A whole run of a BERT cross-encoder exits 3 through the hook if scipy, scikit-learn or
    boto3 was imported; its output is as usual."""
    inp = write(tmp_path / "in.jsonl", jsonl([{"query": "a question", "items": ["an answer", "another"]}]))
    out = tmp_path / "out.parquet"
    args = ["score", str(inp), "--model", bert_cross_encoder, "--out", str(out), "--runtime", "torch"]
    result = hooked("not-imported:scipy,sklearn,boto3", args)
    assert result.rc == 0, result.stderr
    assert len(pq.read_table(out)["scores"][0].as_py()) == 2
