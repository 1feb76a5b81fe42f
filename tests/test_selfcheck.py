"""The start-up self-check: a probe row's scores against the model's own forward."""

from __future__ import annotations

import pytest

from scorecli import Scorer
from scorecli.attention import blocks, dense, kernel
from scorecli.checks.selfcheck import SelfCheckError
from tests.builders import models


@pytest.mark.parametrize(
    "fixture", ["qwen3_seq_cls", "qwen3_seq_cls_3labels", "llama_reward", "gemma2_seq_cls", "gpt_oss_seq_cls"]
)
@pytest.mark.parametrize("mode", ["mis", "single"])
def test_self_check_passes_on_supported_models(request, fixture, mode):
    scorer = Scorer(request.getfixturevalue(fixture), mode=mode)
    assert 0.0 <= scorer.self_check_error < 1e-5


@pytest.mark.parametrize("activation", ["none", "softmax"])
def test_self_check_on_label_token_scores(qwen3_causal_lm, activation):
    scorer = Scorer(qwen3_causal_lm, label_tokens=("yes", "no"), activation=activation)
    assert 0.0 <= scorer.self_check_error < 1e-5


def test_self_check_stops_an_unreproduced_logit_transform(tmp_path, monkeypatch):
    """Simulated: the head forgets Cohere's logit_scale. The Scorer refuses to start;
    self_check=False (--no-self-check) starts it anyway."""
    import scorecli.kinds.decoder

    path = models.build_logit_transform_lm(tmp_path, "cohere")
    monkeypatch.setattr(scorecli.kinds.decoder, "lm_logit_transform", lambda model: (None, 1.0))
    with pytest.raises(SelfCheckError, match="differ from the model's own forward"):
        Scorer(path, label_tokens=("yes", "no"))
    Scorer(path, label_tokens=("yes", "no"), self_check=False)


def test_self_check_stops_an_ignored_attention_argument(gemma2_seq_cls, monkeypatch):
    """Simulated: sdpa drops Gemma 2's attention soft cap."""

    def uncapped(q, k, v, mask=None, scale=None, softcap=None, causal=False, sinks=None):
        return kernel.attention(q, k, v, mask, scale, None, causal, sinks)

    monkeypatch.setattr(dense, "attention", uncapped)
    monkeypatch.setattr(blocks, "attention", uncapped)
    with pytest.raises(SelfCheckError):
        Scorer(gemma2_seq_cls, attention="sdpa")


@pytest.mark.parametrize("max_seq_len", [2, 8, 40])
def test_self_check_fits_the_probe_in_a_short_max_seq_len(qwen3_seq_cls, max_seq_len):
    from transformers import AutoTokenizer

    from scorecli.kinds.probes import probe_rows

    rows = probe_rows(AutoTokenizer.from_pretrained(qwen3_seq_cls), max_seq_len)
    assert all(len(q) + len(item) <= max_seq_len and item for q, items in rows for item in items)
    assert Scorer(qwen3_seq_cls, max_seq_len=max_seq_len).self_check_error < 1e-5  # query and items cut to fit


@pytest.mark.parametrize("fixture", ["bert_cross_encoder", "minilm_cross_encoder"])
def test_self_check_on_the_fused_cross_encoder(request, fixture):
    scorer = Scorer(request.getfixturevalue(fixture), runtime="torch")
    assert scorer.backend_name == "sdpa (fused encoder)" and 0.0 <= scorer.self_check_error < 1e-5
    assert scorer.metadata["self_check"].startswith("passed")
    own = Scorer(request.getfixturevalue(fixture), attention="eager")  # the model's own forward: nothing to check
    assert own.self_check_error is None and own.metadata["self_check"].startswith("not needed")


def test_self_check_stops_a_wrong_fused_encoder(bert_cross_encoder, monkeypatch):
    """Simulated: the fused projections scale the queries wrongly."""
    from scorecli.runtimes import fast_encoder

    real = fast_encoder._fuse

    def wrong(sa):
        weight, bias, heads, size, scale = real(sa)
        return weight, bias, heads, size, scale * 1.5

    monkeypatch.setattr(fast_encoder, "_fuse", wrong)
    with pytest.raises(SelfCheckError):
        Scorer(bert_cross_encoder, runtime="torch")
    assert Scorer(bert_cross_encoder, self_check=False, runtime="torch").metadata["self_check"] == "off"


def test_inspect_check_reports_each_mode(qwen3_causal_lm, monkeypatch):
    from scorecli.inspect import check

    mode, *lines = check(qwen3_causal_lm, ("yes", "no"), False)[0]
    assert mode == "mode:           mis (--mode auto)"
    assert len(lines) == 2 and all(line.startswith("self-check:     passed (max relative") for line in lines)
    assert "(mis, sdpa, float32 on cpu)" in lines[0] and "(single, sdpa, float32 on cpu)" in lines[1]
    import scorecli.kinds.decoder

    monkeypatch.setattr(scorecli.kinds.decoder, "lm_logit_transform", lambda model: (None, 0.5))  # a wrong head
    (mode, *lines), ok = check(qwen3_causal_lm, None, False)  # no label tokens: any two
    assert not ok and len(lines) == 2 and all("FAILED: scorecli's scores" in line for line in lines)


def test_the_probe_looks_like_real_work(qwen3_seq_cls):
    """Two rows (two sequences in one batch in either mode), items of very different lengths,
    packed rows longer than small models' sliding windows."""
    from scorecli.io.readers import RawRow
    from scorecli.kinds.probes import probe_rows

    scorer = Scorer(qwen3_seq_cls, mode="mis")
    rows = probe_rows(scorer.loaded.tokenizer, scorer.spec.max_seq_len)
    lengths = [len(item) for _, items in rows for item in items]
    assert len(rows) >= 2 and min(lengths) <= 3 and max(lengths) >= 40
    assert max(len(q) + sum(len(i) for i in items) for q, items in rows) > 128
    prepared = scorer.prepare([RawRow({"query_ids": q, "item_ids": items}, "probe") for q, items in rows])
    assert len(prepared.batches) == 1 and len(prepared.batches[0]) >= 2


def test_self_check_compares_hidden_states(qwen3_seq_cls, monkeypatch):
    """Simulated: the pooled hidden states go wrong while the scores stay right."""
    from scorecli.runtimes import forward

    real = forward.DecoderForward._pooled

    def wrong(self, inputs, kwargs, pooling):
        pooled = real(self, inputs, kwargs, pooling)
        return forward.Pooled(
            pooled.score_states, pooled.logits, None if pooled.hidden is None else pooled.hidden * 1.01
        )

    monkeypatch.setattr(forward.DecoderForward, "_pooled", wrong)
    with pytest.raises(SelfCheckError, match="hidden states"):
        Scorer(qwen3_seq_cls)


def test_self_check_catches_leakage_between_sequences_of_a_batch(qwen3_seq_cls, monkeypatch):
    """Simulated: flex's mask forgets which sequence of the ragged row a key belongs to."""
    from scorecli.attention import flex

    def leaky(doc, segment):
        def mask_mod(b, h, q_idx, kv_idx):
            seg_kv = segment[kv_idx]
            return (kv_idx <= q_idx) & ((seg_kv == 0) | (seg_kv == segment[q_idx]))

        return mask_mod

    monkeypatch.setattr(flex, "mis_mask_mod", leaky)
    with pytest.raises(SelfCheckError):
        Scorer(qwen3_seq_cls, attention="flex", mode="mis")
