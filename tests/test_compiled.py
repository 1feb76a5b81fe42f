"""`--compile`: a decoder's layers under torch.compile score as the eager layers do.

The real compile runs once here on the CPU (inductor's C++ backend; ~30 s); the fallbacks are
driven by stand-ins for the compiled function, so they cost nothing.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from scorecli import Scorer
from scorecli.errors import Notice, UsageError
from scorecli.io.readers import RawRow
from scorecli.runtimes import compiled as compiled_mod
from tests.test_invariance import make_rows


def _rows(n: int = 9, seed: int = 5) -> list[RawRow]:
    common = "a shared instruction that every row of the window starts with, long enough to share "
    rows = make_rows(n, seed=seed, max_items=8)
    return [RawRow(dict(r, query=common + r["query"]), f"t:{k + 1}") for k, r in enumerate(rows)]


def _scores(table) -> np.ndarray:
    return np.concatenate([np.array(s, dtype=np.float64).reshape(-1) for s in table["scores"].to_pylist() if s])


def test_compiled_layers_score_as_eager(qwen3_seq_cls):
    """Real torch.compile (dynamic shapes: batches of different token counts, a shared prefix)."""
    rows = _rows()
    eager = Scorer(qwen3_seq_cls, compile="off", max_batch_tokens=300, attention="sdpa").score_rows(rows)
    with pytest.warns(Notice, match="compiling the model's layers"):
        scorer = Scorer(qwen3_seq_cls, compile="on", max_batch_tokens=300, attention="sdpa")
    assert scorer.family.compiled.active and scorer.self_check_note.startswith("passed")
    prepared = scorer.prepare(rows)
    assert len(prepared.batches) > 2 and len(prepared.shared)  # several token counts, one compile
    got = scorer.run(prepared)
    assert scorer.family.compiled.active  # nothing fell back
    np.testing.assert_allclose(_scores(got), _scores(eager), atol=1e-5)
    scorer.family.compiled.restore("test over")


class _Broken:
    """Stand-in for torch.compile: its function fails as the compiler does, or computes wrongly."""

    def __init__(self, mode: str):
        self.mode, self.calls = mode, 0

    def __call__(self, fn, dynamic=None):
        def compiled(layer, *args, **kwargs):
            self.calls += 1
            if self.mode == "fail":
                from torch._dynamo.exc import BackendCompilerFailed

                raise BackendCompilerFailed(lambda *a: None, RuntimeError("no C++ compiler found"), None)
            out = fn(layer, *args, **kwargs)
            if self.mode == "scaled":  # a miscompile that hits every token alike (a wrong norm epsilon, say)
                return out * 1.05
            return out.roll(1, dims=1)  # a miscompiled layer: tokens shifted

        return compiled


@pytest.mark.parametrize("mode", ["fail", "wrong", "scaled"])
def test_auto_compile_falls_back_to_eager(qwen3_seq_cls, monkeypatch, mode):
    """A compiler failure, or compiled layers that fail the self-check (whose reference runs the
    layers eagerly: a miscompile that changes a lone sequence as it changes a packed one is caught
    too): one warning, eager scores."""
    rows = _rows(5, seed=2)
    expected = Scorer(qwen3_seq_cls, compile="off").score_rows(rows)
    broken = _Broken(mode)
    monkeypatch.setattr(torch, "compile", broken)
    monkeypatch.setattr(compiled_mod.torch, "compile", broken)
    monkeypatch.setattr(compiled_mod, "AUTO_DEVICES", ("cuda", "cpu"))  # auto as on a GPU
    with pytest.warns(RuntimeWarning, match="running the layers uncompiled"):
        scorer = Scorer(qwen3_seq_cls)
    assert broken.calls and not scorer.family.compiled.active
    assert scorer.self_check_note.startswith("passed")
    np.testing.assert_allclose(_scores(scorer.score_rows(rows)), _scores(expected), atol=1e-6)


def test_compile_on_is_strict(qwen3_seq_cls, monkeypatch):
    broken = _Broken("fail")
    monkeypatch.setattr(compiled_mod.torch, "compile", broken)
    from torch._dynamo.exc import BackendCompilerFailed

    with pytest.raises(BackendCompilerFailed):
        Scorer(qwen3_seq_cls, compile="on")


def test_compile_auto_is_off_on_cpu_and_on_refuses_what_it_cannot_compile(qwen3_seq_cls, bert_cross_encoder):
    assert Scorer(qwen3_seq_cls).family.compiled is None  # auto: CUDA only
    with pytest.raises(UsageError, match="--compile on"):
        compiled_mod.compile_layers("on", torch.nn.Linear(2, 2), torch.device("cpu"))
    with pytest.raises(UsageError, match="--compile on"):
        Scorer(bert_cross_encoder, compile="on", runtime="torch")
    assert Scorer(bert_cross_encoder, runtime="torch").family.__dict__.get("compiled") is None


def test_compile_auto_only_for_jobs_long_enough(qwen3_seq_cls, monkeypatch, tmp_path):
    """`auto` compiles when 2 x parameters x the job's tokens reaches COMPILE_MIN_FLOPS (the CLI
    estimates the tokens from its inputs' sizes); an unknown size (stdin, the library) compiles."""
    from scorecli.io.readers import estimate_tokens

    monkeypatch.setattr(compiled_mod, "AUTO_DEVICES", ("cuda", "cpu"))
    big = tmp_path / "big.jsonl"
    big.write_text('{"query": "q", "items": ["a"]}\n' * 20000)
    small = tmp_path / "small.jsonl"
    small.write_text('{"query": "q", "items": ["a"]}\n')
    assert estimate_tokens([str(big)]) == big.stat().st_size // 4 and estimate_tokens(["-"]) is None
    base = Scorer(qwen3_seq_cls, compile="off").forward.base
    monkeypatch.setattr(compiled_mod, "COMPILE_MIN_FLOPS", 2.0 * sum(p.numel() for p in base.parameters()) * 1000)
    compiled = {
        n: compiled_mod.compile_layers("auto", base, torch.device("cpu"), estimate_tokens([str(p)]))
        for n, p in [("big", big), ("small", small)]
    }
    assert compiled["small"] is None and compiled["big"] is not None
    compiled["big"].restore("test over")
    assert compiled_mod.compile_layers("auto", base, torch.device("cpu"), None) is not None
