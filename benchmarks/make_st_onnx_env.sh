#!/usr/bin/env bash
# Build the sentence-transformers ONNX peer environment for bench_vs_crossencoder.py (issue 21).
#
#     benchmarks/make_st_onnx_env.sh [DIR]      # default: .bench-st-onnx under the repository
#
# A BENCHMARK PEER ENVIRONMENT ONLY: scorecli neither needs nor uses it. It exists because
# sentence-transformers' own `backend="onnx"` goes through optimum, and no optimum release
# imports under the project's transformers 5.x (optimum-onnx 0.1.0 / optimum[onnxruntime] need
# transformers < 4.58; under 5.24 the import fails on `is_offline_mode`). So the real ST ONNX
# peers run in this separate Python 3.11 venv:
#
#   torch 2.13.0 (+cpu), transformers 4.53.3, optimum[onnxruntime] 1.27.0, onnxscript, pyarrow,
#   sentence-transformers 5.1.2's dependencies with sentence-transformers 5.7.0 over them (--no-deps)
#
# and two patches to optimum 1.27.0 for torch 2.13 (whose TorchScript ONNX exporter moved and is no
# longer the default):
#   - optimum/exporters/onnx/model_patcher.py: `from torch.onnx.symbolic_opset14 import (` becomes
#     `from torch.onnx._internal.torchscript_exporter.symbolic_opset14 import (`
#   - optimum/exporters/onnx/convert.py: the `onnx_export(...)` call gets `dynamo=False,` after
#     `opset_version=opset,`
#
# Idempotent: a finished environment (right versions, patches in place) is only checked again.
# Prints the environment's interpreter on its last line; pass it to
#     python benchmarks/bench_vs_crossencoder.py --st-onnx-python DIR/bin/python
# (or set SCORECLI_ST_ONNX_PYTHON). The base interpreter is $ST_ONNX_BASE_PYTHON (default python3.11).
# Off this machine, a torch==2.13.0 CPU wheel may need PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${1:-$ROOT/.bench-st-onnx}"
BASE="${ST_ONNX_BASE_PYTHON:-python3.11}"
PY="$DIR/bin/python"

versions_ok() {
    "$PY" - <<'EOF' 2>/dev/null
import importlib.metadata as md
want = {"torch": "2.13.0", "transformers": "4.53.3", "optimum": "1.27.0", "sentence-transformers": "5.7.0"}
for name, version in want.items():
    got = md.version(name)
    if got.split("+")[0] != version:
        raise SystemExit(f"{name} {got} != {version}")
for name in ("onnxruntime", "onnxscript", "pyarrow"):
    md.version(name)
EOF
}

if [ ! -x "$PY" ]; then
    echo "== creating venv $DIR with $BASE" >&2
    "$BASE" -m venv "$DIR"
fi
"$PY" -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version' \
    || { echo "error: $PY is not Python 3.11" >&2; exit 1; }

if versions_ok; then
    echo "== packages already in place" >&2
else
    echo "== installing packages (a few minutes)" >&2
    "$PY" -m pip install --quiet torch==2.13.0
    "$PY" -m pip install --quiet "optimum[onnxruntime]==1.27.0" "sentence-transformers==5.1.2" pyarrow onnxscript
    "$PY" -m pip install --quiet --no-deps sentence-transformers==5.7.0
    versions_ok || { echo "error: wrong package versions after install" >&2; "$PY" -m pip list >&2; exit 1; }
fi

SITE="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
PATCHER="$SITE/optimum/exporters/onnx/model_patcher.py"
CONVERT="$SITE/optimum/exporters/onnx/convert.py"

echo "== patching optimum for torch 2.13" >&2
# 1. the opset-14 symbolic helpers live under torch.onnx._internal.torchscript_exporter now
sed -i 's/^from torch\.onnx\.symbolic_opset14 import (  # noqa: E402$/from torch.onnx._internal.torchscript_exporter.symbolic_opset14 import (  # noqa: E402/' "$PATCHER"
# 2. torch 2.13 exports with dynamo by default: ask the `onnx_export(...)` call for the TorchScript exporter
"$PY" - "$CONVERT" <<'EOF'
import re, sys
path = sys.argv[1]
text = open(path).read()
call = re.search(r"onnx_export\(\n(.*?)\n\s*\)\n", text, re.S)
if call is None:
    raise SystemExit(f"no onnx_export( call found in {path}")
body = call.group(1)
if "dynamo=False" not in body:
    if body.count("opset_version=opset,") != 1:
        raise SystemExit(f"expected one `opset_version=opset,` in the onnx_export( call of {path}")
    body = body.replace("opset_version=opset,", "opset_version=opset, dynamo=False,")
    text = text[: call.start(1)] + body + text[call.end(1) :]
    open(path, "w").write(text)
EOF

# check both patches took, and that the export path imports
grep -q '^from torch\.onnx\._internal\.torchscript_exporter\.symbolic_opset14 import (' "$PATCHER" \
    || { echo "error: model_patcher.py patch did not apply ($PATCHER)" >&2; exit 1; }
if grep -q '^from torch\.onnx\.symbolic_opset14 import' "$PATCHER"; then
    echo "error: model_patcher.py still imports torch.onnx.symbolic_opset14" >&2; exit 1
fi
[ "$(grep -c 'opset_version=opset, dynamo=False,' "$CONVERT")" = 1 ] \
    || { echo "error: convert.py patch did not apply ($CONVERT)" >&2; exit 1; }
"$PY" -W ignore -c '
import optimum.exporters.onnx.model_patcher, optimum.exporters.onnx.convert  # the patched modules
from optimum.onnxruntime import ORTModelForSequenceClassification  # what backend="onnx" loads
from sentence_transformers.backend import export_dynamic_quantized_onnx_model, export_optimized_onnx_model
' || { echo "error: the patched environment does not import" >&2; exit 1; }

echo "== ready: sentence-transformers ONNX peer environment" >&2
echo "$PY"
