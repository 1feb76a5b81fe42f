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
    from torch._dynamo.utils import counters

    rows = _rows()
    eager = Scorer(qwen3_seq_cls, compile="off", max_batch_tokens=300, attention="sdpa").score_rows(rows)
    torch._dynamo.reset()
    counters.clear()
    with pytest.warns(Notice, match="compiling the model's layers"):
        scorer = Scorer(qwen3_seq_cls, compile="on", max_batch_tokens=300, attention="sdpa")
    assert scorer.family.compiled.active and scorer.self_check_note.startswith("passed")
    prepared = scorer.prepare(rows)
    assert len(prepared.batches) > 2 and len(prepared.shared)  # several token counts, one compile
    got = scorer.run(prepared)
    assert scorer.family.compiled.active  # nothing fell back
    np.testing.assert_allclose(_scores(got), _scores(eager), atol=1e-5)
    # one graph per layer, traced for every token count at once: attention is an operator inside
    # it (`attention.registry`), not a break between graphs, and no batch's size is baked in (but
    # for a batch of one sequence: the compiler's own 0/1 rule, which the GPU's packed batches of
    # one sequence meet from the first batch on)
    assert dict(counters["graph_break"]) == {}, list(counters["graph_break"])
    assert counters["frames"]["total"] <= 2 and counters["stats"]["unique_graphs"] <= 2
    scorer.family.compiled.restore("test over")


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_on_cuda_flashinfer_runs_inside_the_compiled_layers(tmp_path):
    """The GPU's path: flashinfer (the cascade) as scorecli's operator inside each compiled layer's
    one graph, in bf16, scores as the eager layers do (within bf16 rounding)."""
    pytest.importorskip("flashinfer")
    from torch._dynamo.utils import counters

    from tests.builders import models

    model = models.build_qwen3_seq_cls(tmp_path / "qwen3_hd64", num_labels=1, head_dim=64)
    rows = _rows()
    flags = {"device": "cuda", "dtype": "bfloat16", "attention": "flashinfer", "max_batch_tokens": 600}
    eager = Scorer(model, compile="off", **flags).score_rows(rows)
    torch._dynamo.reset()
    counters.clear()
    scorer = Scorer(model, compile="on", **flags)
    got = scorer.score_rows(rows)
    assert scorer.family.compiled.active and scorer.backend_name == "flashinfer"
    scale = max(1.0, float(np.abs(_scores(eager)).max()))
    np.testing.assert_allclose(_scores(got), _scores(eager), atol=3e-2 * scale)
    assert dict(counters["graph_break"]) == {}, list(counters["graph_break"])
    assert counters["frames"]["total"] == 1  # packed batches: one sequence each, every token count
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
