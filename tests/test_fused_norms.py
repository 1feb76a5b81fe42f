"""Fused RMSNorm (`scorecli.runtimes.fused_norms`): one `rms_norm` kernel per norm on a GPU, the
same scores as the model's own norms; a norm of another formula is left alone; the self-check's
reference runs the model's own norms, so a wrong fused norm is caught and put back.

On the CPU the runtime is off by default (`DEVICES`); these tests turn it on there.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers.models.gemma.modeling_gemma import GemmaRMSNorm
from transformers.models.llama.modeling_llama import LlamaRMSNorm
from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm

from scorecli import Scorer
from scorecli.io.readers import RawRow
from scorecli.runtimes import fused_norms
from scorecli.runtimes.fused_norms import FusedNorms, computes_rms_norm
from tests.test_invariance import make_rows


def _rows(n: int = 6, seed: int = 4) -> list[RawRow]:
    return [RawRow(r, f"t:{k + 1}") for k, r in enumerate(make_rows(n, seed=seed, max_items=6))]


def _scores(table) -> np.ndarray:
    return np.concatenate([np.array(s, dtype=np.float64).reshape(-1) for s in table["scores"].to_pylist() if s])


def test_which_norms_compute_rms_norm():
    """Llama's and Qwen's formula is `rms_norm`; Gemma's (`1 + weight`) is not, nor is a norm
    whose forward takes more than the activations."""

    class OtherRMSNorm(torch.nn.Module):  # a norm that centres first: a LayerNorm in all but name
        def __init__(self, d):
            super().__init__()
            self.weight, self.eps = torch.nn.Parameter(torch.ones(d)), 1e-6

        def forward(self, x):
            x = x - x.mean(-1, keepdim=True)
            return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    assert computes_rms_norm(Qwen3RMSNorm(16, eps=1e-6)) and computes_rms_norm(LlamaRMSNorm(16, eps=1e-5))
    assert not computes_rms_norm(GemmaRMSNorm(16, eps=1e-6))
    assert not computes_rms_norm(OtherRMSNorm(16))
    model = torch.nn.Sequential(Qwen3RMSNorm(8), GemmaRMSNorm(8), torch.nn.Linear(8, 8), OtherRMSNorm(8))
    fused = FusedNorms(model)
    assert fused.modules == [model[0]]
    x = torch.randn(4, 8)
    with torch.no_grad():
        model[0].weight.uniform_(0.5, 1.5)
        ours = model[0](x)
        with fused.paused():
            assert "forward" in model[0].__dict__
            theirs = model[0](x)
        torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-6)
    fused.restore()
    assert "forward" not in model[0].__dict__


@pytest.fixture
def fused_on_cpu(monkeypatch):
    monkeypatch.setattr(fused_norms, "DEVICES", ("cuda", "cpu"))  # as on a GPU


@pytest.mark.parametrize("mode", ["mis", "single"])
def test_fused_norms_score_as_the_models_own(qwen3_seq_cls, fused_on_cpu, mode):
    """Every RMSNorm of Qwen3 (layer norms, per-head query and key norms, the final norm) runs fused,
    and the scores are the model's own (float32)."""
    rows = _rows()
    scorer = Scorer(qwen3_seq_cls, mode=mode, attention="sdpa")
    fused = scorer.family.fused_norms
    layers = len(scorer.family.forward.base.layers)
    assert fused is not None and fused.active and len(fused.modules) == 4 * layers + 1
    assert scorer.self_check_note.startswith("passed")
    got = _scores(scorer.score_rows(rows))
    fused.restore()
    np.testing.assert_allclose(got, _scores(scorer.score_rows(rows)), rtol=0, atol=2e-6)


def test_fused_norms_off_on_cpu_by_default(qwen3_seq_cls):
    assert Scorer(qwen3_seq_cls, attention="sdpa").family.fused_norms is None  # DEVICES: CUDA only


def test_a_wrong_fused_norm_fails_the_self_check_and_is_put_back(qwen3_seq_cls, fused_on_cpu, monkeypatch):
    """The self-check's reference runs the model's own norms: fused norms that compute something
    else are caught, put back with one warning, and the run scores as the model does."""
    expected = _scores(Scorer(qwen3_seq_cls, attention="sdpa", mode="mis").score_rows(_rows()))
    monkeypatch.setattr(fused_norms, "computes_rms_norm", lambda module: True)
    real = torch.nn.functional.rms_norm
    monkeypatch.setattr(fused_norms.F, "rms_norm", lambda x, shape, w, eps: real(x, shape, w, eps) * 1.05)
    with pytest.warns(RuntimeWarning, match="fused RMSNorm failed the self-check"):
        scorer = Scorer(qwen3_seq_cls, attention="sdpa", mode="mis")
    assert not scorer.family.fused_norms.active and scorer.self_check_note.startswith("passed")
    np.testing.assert_allclose(_scores(scorer.score_rows(_rows())), expected, rtol=0, atol=1e-6)


def test_a_decoder_embedders_norms_fuse_and_embed_as_its_own(tmp_path, fused_on_cpu):
    """A Qwen3-based embedding model (sentence-transformers folder): its norms fused, the same
    scores and embeddings as with the model's own norms, the self-check passed against them."""
    from tests.builders.embedding import build_sentence_model

    path = build_sentence_model(tmp_path / "st", base="qwen3", pooling="lasttoken", normalize=True)
    rows = _rows(4, seed=9)
    scorer = Scorer(path, pooled_hidden_states=True)
    fused = scorer.family.fused_norms
    assert fused is not None and fused.active and fused.modules
    assert scorer.self_check_note.startswith("passed")
    got = scorer.score_rows(rows)
    fused.restore()
    own = scorer.score_rows(rows)
    np.testing.assert_allclose(_scores(got), _scores(own), rtol=0, atol=2e-6)
    for a, b in zip(got["pooled_hidden_states"].to_pylist(), own["pooled_hidden_states"].to_pylist()):
        np.testing.assert_allclose(np.array(a, dtype=np.float64), np.array(b, dtype=np.float64), rtol=0, atol=2e-6)


def test_a_wrong_fused_norm_in_an_embedder_is_put_back(tmp_path, fused_on_cpu, monkeypatch):
    from tests.builders.embedding import build_sentence_model

    path = build_sentence_model(tmp_path / "st", base="qwen3", pooling="mean")
    expected = _scores(Scorer(path).score_rows(_rows(3)))
    monkeypatch.setattr(fused_norms, "computes_rms_norm", lambda module: True)
    real = torch.nn.functional.rms_norm
    monkeypatch.setattr(fused_norms.F, "rms_norm", lambda x, shape, w, eps: real(x, shape, w, eps) * 1.05)
    with pytest.warns(RuntimeWarning, match="fused RMSNorm failed the self-check"):
        scorer = Scorer(path)
    assert not scorer.family.fused_norms.active and scorer.self_check_note.startswith("passed")
    np.testing.assert_allclose(_scores(scorer.score_rows(_rows(3))), expected, rtol=0, atol=1e-6)


def test_a_failure_the_fused_norms_do_not_cause_is_not_blamed_on_them(qwen3_seq_cls, fused_on_cpu, monkeypatch):
    """A self-check that fails with the norms paused too (here: a tolerance nothing meets) is the
    backend's or the model's: the run stops as without fused norms, with no warning about them."""
    import warnings

    from scorecli.checks import selfcheck

    monkeypatch.setattr(selfcheck, "TOLERANCE_FP32", -1.0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(selfcheck.SelfCheckError):
            Scorer(qwen3_seq_cls, attention="sdpa")
    assert not [w for w in caught if "fused RMSNorm" in str(w.message)]


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="the fused kernel is CUDA's")
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_fused_norms_on_cuda_score_as_the_models_own(qwen3_seq_cls, dtype):
    """On CUDA (the default there): the same scores as the model's own norms, to float32 rounding
    or within bf16 rounding."""
    rows = _rows()
    scorer = Scorer(qwen3_seq_cls, attention="sdpa", device="cuda", dtype=dtype, compile="off")
    fused = scorer.family.fused_norms
    assert fused is not None and fused.active and scorer.self_check_note.startswith("passed")
    got = _scores(scorer.score_rows(rows))
    with fused.paused():
        own = _scores(scorer.score_rows(rows))
    scale = max(1.0, float(np.abs(own).max()))
    np.testing.assert_allclose(got, own, rtol=0, atol=(1e-5 if dtype == "float32" else 3e-2) * scale)
