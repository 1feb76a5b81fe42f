"""The GPU session's scripts run on the CPU with flashinfer's stand-in (`--dry`), so a GPU
session never finds them broken: `benchmarks/gpu_attention.py` times both MIS plans on
scorecli's own packing and reports how far they are apart."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e  # the console script (or Ray) end to end

ROOT = Path(__file__).resolve().parent.parent


def test_gpu_attention_dry_runs_both_plans_and_they_agree(tmp_path):
    cmd = [sys.executable, str(ROOT / "benchmarks" / "gpu_attention.py"), "--dry", "--tokens", "700"]
    proc = subprocess.run(cmd + ["--out", str(tmp_path)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = [json.loads(line) for line in (tmp_path / "attention.jsonl").read_text().splitlines()]
    plans = [r for r in records if "plan" in r]
    assert {(r["shape"], r["plan"]) for r in plans} == {
        (s, p) for s in ("sglang", "passage") for p in ("paged", "cascade")
    }
    for r in plans:
        assert r["tokens"] >= 700 and r["ms_per_call"] > 0
        if r["plan"] == "cascade":  # bf16 outputs of about unit size: rounding apart, no more
            assert r["max_abs_diff_vs_first"] < 0.05, r
    norms = [r for r in records if "norm" in r]
    assert len(norms) == 2 and all(r["max_abs_diff"] < 0.1 for r in norms), norms
