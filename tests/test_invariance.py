"""The heart of the suite: MIS == single-item == the model's own Hugging Face forward.

Every kind, every CPU attention backend, batched and unbatched, text and pre-tokenized
rows, rows of very different lengths, pooled hidden states. Float32, max abs error
<= 1e-4 on scores and <= 1e-3 on pooled states (docs/models.md: How items are scored).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from scorecli import Scorer
from scorecli.io.readers import RawRow
from tests.reference import load_reference, reference_rows, sequence_ids

WORDS = "the quick brown fox jumps over a lazy dog while yes no maybe relevant passage answers query".split()


def make_rows(n_rows: int, seed: int = 0, max_items: int = 6, max_len: int = 30) -> list[dict]:
    """Rows of very different lengths: empty item lists, one item, long and short items."""
    rng = np.random.default_rng(seed)
    rows = []
    for r in range(n_rows):
        words = lambda n: " ".join(rng.choice(WORDS, size=n))
        query = words(int(rng.integers(1, max_len)))
        n_items = 0 if r == 1 else int(rng.integers(1, max_items + 1))
        items = [words(int(rng.integers(1, max_len))) for _ in range(n_items)]
        rows.append({"id": f"r{r}", "query": query, "items": items})
    return rows


def scorer_outputs(path, rows, **kw):
    """The Scorer's outputs; on the CPU in float32 unless the test names a device or dtype (on a
    GPU machine the Scorer's own default would be CUDA in bfloat16)."""
    kw.setdefault("device", "cpu")
    table = Scorer(path, pooled_hidden_states=True, **kw).score_rows(raw_rows(rows))
    return table_outputs(table)


def raw_rows(rows: list[dict]) -> list[RawRow]:
    return [RawRow(r, f"test:{k + 1}") for k, r in enumerate(rows)]


def table_outputs(table):
    """(table, scores [items, labels] per row, pooled hidden states per row)."""
    n_labels = len(output_labels(table))
    scores = [np.array(s, dtype=np.float32).reshape(-1, n_labels) for s in table["scores"].to_pylist()]
    hidden = [np.array(h, dtype=np.float32) for h in table["pooled_hidden_states"].to_pylist()]
    return table, scores, hidden


def output_labels(table):
    return table.schema.metadata[b"labels"].decode().split(",")


def assert_matches(rows, ref, scores, hidden):
    for row, (ref_s, ref_h), s, h in zip(rows, ref, scores, hidden):
        n = len(row.get("items", row.get("item_ids")))
        assert s.shape[0] == n
        if n:
            assert s.shape == ref_s.shape
            np.testing.assert_allclose(s, ref_s, atol=1e-4, rtol=0)
            np.testing.assert_allclose(h.reshape(ref_h.shape), ref_h, atol=1e-3, rtol=0)


CASES = [
    ("qwen3_seq_cls", "seq-cls", {}),
    ("qwen3_seq_cls_3labels", "seq-cls", {"activation": "softmax"}),
    ("llama_reward", "seq-cls", {}),
    ("qwen3_causal_lm", "causal-lm", {"label_tokens": ("yes", "no")}),
    ("qwen3_causal_lm", "causal-lm", {"label_tokens": ("yes", "no"), "activation": "softmax"}),
]


@pytest.mark.parametrize("fixture,kind,extra", CASES)
@pytest.mark.parametrize("mode", ["mis", "single"])
@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_matches_hf_reference(request, fixture, kind, extra, mode, attention):
    path = request.getfixturevalue(fixture)
    rows = make_rows(8, seed=hash(fixture) % 1000)
    _, scores, hidden = scorer_outputs(path, rows, mode=mode, attention=attention, **extra)
    model, tok = load_reference(path, kind, attn=attention)
    label_ids = None
    if kind == "causal-lm":
        label_ids = [tok.encode(t, add_special_tokens=False)[0] for t in extra["label_tokens"]]
    ref = reference_rows(model, tok, kind, rows, label_ids, extra.get("activation", "none"))
    assert_matches(rows, ref, scores, hidden)


def _uncapped(model) -> None:
    for module in model.modules():
        if getattr(module, "attn_logit_softcapping", None):
            module.attn_logit_softcapping = None


@pytest.mark.parametrize("mode", ["mis", "single"])
@pytest.mark.parametrize("attention", ["sdpa", "eager", "flex"])
def test_attention_softcap_matches_hf(gemma2_seq_cls, mode, attention):
    """Gemma 2 soft-caps its attention logits: every backend applies the cap. The reference is
    the model's eager forward (transformers' own sdpa path cannot cap)."""
    rows = make_rows(8, seed=41)
    _, scores, hidden = scorer_outputs(gemma2_seq_cls, rows, mode=mode, attention=attention)
    model, tok = load_reference(gemma2_seq_cls, "seq-cls", attn="eager")
    ref = reference_rows(model, tok, "seq-cls", rows)
    assert_matches(rows, ref, scores, hidden)
    _uncapped(model)  # the cap matters here: without it the reference moves far beyond the tolerance
    uncapped = reference_rows(model, tok, "seq-cls", rows)
    assert max(float(np.abs(a[0] - b[0]).max()) for a, b in zip(ref, uncapped) if a[0] is not None) > 1e-2


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_attention_softcap_with_a_shared_prefix(gemma2_seq_cls, attention):
    """The shared prompt's pass (computed once per window) caps its logits too."""
    rows = make_rows(6, seed=43)
    common = " ".join(["the quick brown fox jumps over a lazy dog"] * 3)
    for row in rows:
        row["query"] = f"{common} {row['query']}"
    scorer = Scorer(gemma2_seq_cls, attention=attention, pooled_hidden_states=True)
    prepared = scorer.prepare(raw_rows(rows))
    assert scorer.shares_prefix and len(prepared.shared) >= 16
    _, scores, hidden = table_outputs(scorer.run(prepared))
    model, tok = load_reference(gemma2_seq_cls, "seq-cls", attn="eager")
    assert_matches(rows, reference_rows(model, tok, "seq-cls", rows), scores, hidden)


@pytest.mark.parametrize("mode", ["mis", "single"])
@pytest.mark.parametrize("attention", ["sdpa", "eager", "flex"])
def test_attention_sinks_match_hf(gpt_oss_seq_cls, mode, attention):
    """GPT-OSS adds a learned sink logit per head to every softmax (`s_aux`): sdpa, eager and
    flex (its keys' softmax scaled by sigmoid(lse - sink)) apply it (the reference is the
    model's eager forward); flashinfer refuses it."""
    rows = make_rows(8, seed=47)
    _, scores, hidden = scorer_outputs(gpt_oss_seq_cls, rows, mode=mode, attention=attention)
    model, tok = load_reference(gpt_oss_seq_cls, "seq-cls", attn="eager")
    ref = reference_rows(model, tok, "seq-cls", rows)
    assert_matches(rows, ref, scores, hidden)
    with torch.no_grad():  # the sinks matter here: without them the reference moves far beyond the tolerance
        for layer in model.model.layers:
            layer.self_attn.sinks.fill_(-1e4)
    sinkless = reference_rows(model, tok, "seq-cls", rows)
    assert max(float(np.abs(a[0] - b[0]).max()) for a, b in zip(ref, sinkless) if a[0] is not None) > 1e-2


def test_attention_arguments_no_backend_implements_are_refused():
    from scorecli.attention.dense import SdpaBackend
    from scorecli.attention.registry import _dispatch
    from scorecli.errors import UsageError

    q = torch.zeros(1, 2, 3, 4)
    with pytest.raises(UsageError, match="position bias"):
        _dispatch(
            torch.nn.Identity(),
            q,
            q,
            q,
            None,
            scaling=0.5,
            position_bias=torch.zeros(1),
            scorecli_backend=SdpaBackend(),
        )
    with pytest.raises(UsageError, match="sinks"):
        _dispatch(torch.nn.Identity(), q, q, q, None, scaling=0.5, sinks=torch.zeros(2), scorecli_backend=SdpaBackend())


@pytest.mark.parametrize("arch", ["cohere", "granite", "gemma2"])
@pytest.mark.parametrize("activation", ["none", "softmax"])
def test_lm_logit_transforms_match_hf(tmp_path_factory, arch, activation):
    """Causal LMs whose head scales or caps its logits (Cohere `logit_scale`, Granite
    `logits_scaling`, Gemma 2 `final_logit_softcapping`): label-token scores equal the model's own."""
    from tests.builders import models

    path = models.build_logit_transform_lm(tmp_path_factory.mktemp(f"lm_{arch}"), arch)
    rows = make_rows(5, seed=53)
    extra = {"label_tokens": ("yes", "no"), "activation": activation}
    _, scores, hidden = scorer_outputs(path, rows, **extra)
    model, tok = load_reference(path, "causal-lm", attn="eager")
    label_ids = [tok.encode(t, add_special_tokens=False)[0] for t in extra["label_tokens"]]
    ref = reference_rows(model, tok, "causal-lm", rows, label_ids, activation)
    for _row, (ref_s, ref_h), s, h in zip(rows, ref, scores, hidden):
        if ref_s is not None:
            np.testing.assert_allclose(s, ref_s, rtol=1e-4, atol=1e-7)
            np.testing.assert_allclose(h.reshape(ref_h.shape), ref_h, atol=1e-3, rtol=0)


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
BF16_CASES = [
    ("cpu", "sdpa"),
    ("cpu", "flex"),
    pytest.param("cuda", "sdpa", marks=CUDA),
    pytest.param("cuda", "flex", marks=CUDA),
    pytest.param("cuda", "flashinfer", marks=CUDA),
]


@pytest.mark.parametrize("fixture,kind,extra", [CASES[0], CASES[4]])  # causal-lm: softmax over labels, O(1)
@pytest.mark.parametrize("mode", ["mis", "single"])
@pytest.mark.parametrize("device,attention", BF16_CASES)
def test_bfloat16_matches_hf_bfloat16_reference(request, tmp_path, fixture, kind, extra, mode, device, attention):
    """In bfloat16, scorecli's scores stay as close to the float32 reference as the model's own
    bfloat16 forward does (docs/models.md: How items are scored within bf16 tolerance); heads run in float32."""
    if attention == "flashinfer":
        pytest.importorskip("flashinfer")
        from tests.builders import models  # the kernels take head sizes 64, 128, 256 (the tiny models' is 16)

        build = models.build_qwen3_seq_cls if fixture == "qwen3_seq_cls" else models.build_qwen3_causal_lm
        path = build(tmp_path / fixture, head_dim=64)
    else:
        path = request.getfixturevalue(fixture)
    rows = make_rows(6, seed=37)
    _, scores, _ = scorer_outputs(path, rows, mode=mode, attention=attention, device=device, dtype="bfloat16", **extra)
    label_ids, activation = None, extra.get("activation", "none")
    refs = {}
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        model, tok = load_reference(path, kind, dtype=dtype, device=device)
        if kind == "causal-lm":
            label_ids = [tok.encode(t, add_special_tokens=False)[0] for t in extra["label_tokens"]]
        refs[name] = [r for r, _ in reference_rows(model, tok, kind, rows, label_ids, activation)]
    pairs = [(s, f, b) for s, f, b in zip(scores, refs["fp32"], refs["bf16"]) if f is not None]
    scale = max(1.0, max(float(np.abs(f).max()) for _, f, _ in pairs))
    hf_error = max(float(np.abs(b - f).max()) for _, f, b in pairs)  # the model's own bf16 error
    for s, f, b in pairs:
        np.testing.assert_allclose(s, b, atol=3e-2 * scale, rtol=0)  # == HF bf16 within bf16 tolerance
        assert float(np.abs(s - f).max()) <= 2 * hf_error + 4e-3 * scale  # no worse than HF's own bf16


@pytest.mark.parametrize("fixture", ["qwen3_seq_cls", "qwen3_causal_lm", "llama_reward"])
def test_batched_equals_unbatched(request, fixture):
    path = request.getfixturevalue(fixture)
    extra = {"label_tokens": ("yes", "no")} if fixture == "qwen3_causal_lm" else {}
    rows = make_rows(10, seed=3)
    big, s_big, h_big = scorer_outputs(path, rows, max_batch_tokens=100000, **extra)
    one, s_one, h_one = scorer_outputs(path, rows, max_batch_tokens=1, **extra)
    for a, b in zip(s_big, s_one):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=0)
    for a, b in zip(h_big, h_one):
        np.testing.assert_allclose(a, b, atol=1e-4, rtol=0)
    assert big["num_tokens"].to_pylist() == one["num_tokens"].to_pylist()


def test_mis_costs_fewer_tokens(qwen3_seq_cls):
    rows = make_rows(6, seed=5)
    mis, _, _ = scorer_outputs(qwen3_seq_cls, rows, mode="mis")
    single, _, _ = scorer_outputs(qwen3_seq_cls, rows, mode="single")
    for m, s, row in zip(mis["num_tokens"].to_pylist(), single["num_tokens"].to_pylist(), rows):
        assert m <= s
        if len(row["items"]) > 1:
            assert m < s


def test_pretokenized_rows_match_reference(qwen3_seq_cls):
    rng = np.random.default_rng(7)
    rows = [
        {
            "id": k,
            "query_ids": rng.integers(5, 900, size=int(rng.integers(1, 20))).tolist(),
            "item_ids": [rng.integers(5, 900, size=int(rng.integers(1, 15))).tolist() for _ in range(4)],
        }
        for k in range(4)
    ]
    for mode in ("mis", "single"):
        _, scores, hidden = scorer_outputs(qwen3_seq_cls, rows, mode=mode)
        model, tok = load_reference(qwen3_seq_cls, "seq-cls")
        assert_matches(rows, reference_rows(model, tok, "seq-cls", rows), scores, hidden)


def test_split_rows_match_reference(qwen3_causal_lm):
    """A row longer than --max-seq-len is split into several MIS sequences repeating P."""
    rows = make_rows(4, seed=11, max_items=12, max_len=10)  # every item fits beside P: no truncation
    extra = {"label_tokens": ("yes", "no")}
    table, scores, hidden = scorer_outputs(qwen3_causal_lm, rows, mode="mis", max_seq_len=64, **extra)
    model, tok = load_reference(qwen3_causal_lm, "causal-lm")
    label_ids = [tok.encode(t, add_special_tokens=False)[0] for t in extra["label_tokens"]]
    assert_matches(rows, reference_rows(model, tok, "causal-lm", rows, label_ids), scores, hidden)
    unsplit, _, _ = scorer_outputs(qwen3_causal_lm, rows, mode="mis", **extra)
    assert sum(table["num_tokens"].to_pylist()) > sum(unsplit["num_tokens"].to_pylist())


def test_empty_item_reads_the_prefix_end(llama_reward):
    """An empty item scores P alone (BOS keeps the sequence non-empty), even mid-row in MIS."""
    rows = [{"query": "what is up", "items": ["hello there", "", "dog"]}]
    _, scores, hidden = scorer_outputs(llama_reward, rows, mode="mis")
    model, tok = load_reference(llama_reward, "seq-cls")
    assert_matches(rows, reference_rows(model, tok, "seq-cls", rows), scores, hidden)


@pytest.mark.parametrize("fixture", ["qwen3_seq_cls", "llama_reward"])
@pytest.mark.parametrize("pooling", ["last", "cls"])
def test_last_layer_at_read_rows_equals_full_last_layer(request, fixture, pooling):
    """The last decoder layer computed only at the rows read == the model's whole last layer."""
    from scorecli.io.readers import RawRow

    path = request.getfixturevalue(fixture)
    rows = [RawRow(r, f"test:{k + 1}") for k, r in enumerate(make_rows(8, seed=13))]
    pruned = Scorer(path, pooled_hidden_states=True, pooling=pooling)
    full = Scorer(path, pooled_hidden_states=True, pooling=pooling)
    assert pruned.forward.last is not None
    full.forward.last = None
    a, b = pruned.score_rows(rows), full.score_rows(rows)
    for col, tol in (("score", 1e-5), ("pooled_hidden_states", 1e-4)):
        for x, y in zip(a[col].to_pylist(), b[col].to_pylist()):
            np.testing.assert_allclose(np.array(x, dtype=np.float32), np.array(y, dtype=np.float32), atol=tol, rtol=0)
    layers = pruned.forward.base.layers
    assert type(layers[-1]).__name__ != "RowsLastLayer"  # given back after each batch


PREAMBLE = "judge whether the passage answers the query the quick brown fox jumps over a lazy dog"


@pytest.mark.parametrize("fixture,kind,extra", [CASES[0], CASES[2], CASES[3]])
@pytest.mark.parametrize("mode", ["mis", "single"])
@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_shared_prefix_matches_hf_reference(request, fixture, kind, extra, mode, attention):
    """Rows that start alike: their common tokens run once per window (attention.shared), and
    scores, pooled states and num_tokens stay those of whole sequences."""
    from scorecli.io.readers import RawRow

    path = request.getfixturevalue(fixture)
    rows = make_rows(8, seed=17)
    for r in rows:
        r["query"] = f"{PREAMBLE} {r['query']}"
    scorer = Scorer(path, mode=mode, attention=attention, **extra)
    assert len(scorer.prepare([RawRow(r, "t") for r in rows]).shared) >= 16
    table, scores, hidden = scorer_outputs(path, rows, mode=mode, attention=attention, **extra)
    model, tok = load_reference(path, kind, attn=attention)
    label_ids = (
        [tok.encode(t, add_special_tokens=False)[0] for t in extra["label_tokens"]] if "label_tokens" in extra else None
    )
    assert_matches(rows, reference_rows(model, tok, kind, rows, label_ids), scores, hidden)
    unshared, _, _ = scorer_outputs(path, rows, mode=mode, attention=attention, share_prefix=False, **extra)
    assert table["num_tokens"].to_pylist() == unshared["num_tokens"].to_pylist()


def test_shared_prefix_changes_between_windows(qwen3_seq_cls):
    """Windows whose rows share different preambles (or none), with a bad row skipped: each
    window computes its own shared prefix; scores equal the reference."""
    from scorecli.io.readers import RawRow

    rows = make_rows(9, seed=19)
    for k, r in enumerate(rows):
        r["query"] = f"{PREAMBLE if k < 3 else PREAMBLE.upper() if k < 6 else ''} {r['query']}".strip()
    raw = [RawRow(r, f"test:{k + 1}") for k, r in enumerate(rows)]
    raw.insert(4, RawRow({"query": 3}, "test:bad"))
    scorer = Scorer(qwen3_seq_cls, pooled_hidden_states=True, window_rows=3, skip_bad_rows=True)
    from scorecli.engine.local import score_stream

    windows = list(score_stream(scorer, raw))  # rows 0-2 | 3, bad, 4 | 5-7 (two kinds) | 8
    assert [len(p.shared) >= 16 for p, _ in windows] == [True, True, False, False]
    import pyarrow as pa

    table = pa.concat_tables([t for _, t in windows])
    assert table["error"].to_pylist()[4] is not None
    good = [k for k in range(10) if k != 4]
    scores = [np.array(table["scores"][k].as_py(), dtype=np.float32).reshape(-1, 1) for k in good]
    hidden = [np.array(table["pooled_hidden_states"][k].as_py(), dtype=np.float32) for k in good]
    model, tok = load_reference(qwen3_seq_cls, "seq-cls")
    assert_matches(rows, reference_rows(model, tok, "seq-cls", rows), scores, hidden)


def test_cls_pooling_does_not_share(llama_reward):
    """A decoder's first token is read with --pooling cls: it must stay in the batches."""
    from scorecli.io.readers import RawRow

    rows = [{"query": f"{PREAMBLE} {q}", "items": ["a dog", "no"]} for q in ("yes", "maybe so")]
    assert not Scorer(llama_reward, pooled_hidden_states=True, pooling="cls").shares_prefix
    assert len(Scorer(llama_reward).prepare([RawRow(r, "t") for r in rows]).shared) >= 16


@pytest.mark.parametrize("fixture", ["qwen3_seq_cls", "llama_reward"])
def test_items_ending_in_the_pad_token_are_read_where_the_models_head_reads(fixture, request):
    """A sequence classifier's own head (transformers' `*ForSequenceClassification`) reads the
    last token that is not its pad token; items ending in it (pad = eos, as many configs set:
    text ending in the EOS string, or `item_ids` ending in its id) are read there, in MIS and
    single mode: scores and pooled states equal the model's own forward over P + I_k."""
    path = request.getfixturevalue(fixture)
    model, tok = load_reference(path, "seq-cls")
    pad = model.config.pad_token_id
    assert isinstance(pad, int)
    pad_text = tok.convert_ids_to_tokens(pad)
    rng = np.random.default_rng(3)
    ids = lambda n: rng.integers(5, 900, size=n).tolist()
    rows = [
        {
            "id": 0,
            "query_ids": ids(6),
            "item_ids": [ids(4) + [pad], ids(3) + [pad, pad], ids(5), [pad], ids(2) + [pad] + ids(2)],
        },
        {"id": 1, "query": "which planet is red", "items": ["mars" + pad_text, "bananas", pad_text + pad_text]},
    ]

    @torch.inference_mode()
    def reference(seq: list[int]) -> tuple[np.ndarray, np.ndarray]:
        out = model(input_ids=torch.tensor([seq]), output_hidden_states=True)
        last = max(j for j, t in enumerate(seq) if t != pad)
        return out.logits[0].numpy(), out.hidden_states[-1][0, last].numpy()

    ref = []
    for row in rows:
        pairs = [
            reference(sequence_ids(tok, row.get("query", row.get("query_ids")), item))
            for item in row.get("items", row.get("item_ids"))
        ]
        ref.append((np.stack([p[0] for p in pairs]), np.stack([p[1] for p in pairs])))
    assert any(sequence_ids(tok, rows[1]["query"], it)[-1] == pad for it in rows[1]["items"])  # the case is there
    for mode in ("mis", "single"):
        _, scores, hidden = scorer_outputs(path, rows, mode=mode)
        assert_matches(rows, ref, scores, hidden)


def test_an_item_of_pad_tokens_after_a_prefix_ending_in_one_is_a_bad_row(qwen3_seq_cls):
    """Where the model's head would read inside the prefix, before its last token, scorecli
    does not guess: the row is a bad row (exit 2, or null with --skip-bad-rows)."""
    pad = load_reference(qwen3_seq_cls, "seq-cls")[0].config.pad_token_id
    rows = [{"id": 0, "query_ids": [11, 12, pad], "item_ids": [[13, 14], [pad, pad]]}]
    table = Scorer(qwen3_seq_cls, device="cpu", skip_bad_rows=True).score_rows(raw_rows(rows))
    assert table["score"].to_pylist() == [None]
    assert "pad token" in table["error"].to_pylist()[0] and "'item_ids'[1]" in table["error"].to_pylist()[0]
    # an empty item there too: it was read at the prefix's pad token, the model's head reading earlier
    rows = [{"id": 0, "query_ids": [11, 12, pad], "item_ids": [[], [13, 14]]}]
    for mode in ("mis", "single"):
        table = Scorer(qwen3_seq_cls, device="cpu", skip_bad_rows=True, mode=mode).score_rows(raw_rows(rows))
        assert table["score"].to_pylist() == [None]
        assert "item is empty" in table["error"].to_pylist()[0] and "'item_ids'[0]" in table["error"].to_pylist()[0]


def test_longrope_sequences_stop_where_the_rotary_factors_switch(tmp_path):
    """LongRoPE (Phi-3.5, Phi-4-mini): transformers picks short or long rotary factors by the
    longest position of a whole forward call, so an item past the switch would move the scores
    of every item batched or packed with it. scorecli runs sequences up to the switch only,
    where every item is exact; past it, an item is a bad row and --max-seq-len is refused."""
    from scorecli.errors import UsageError
    from tests.builders.models import build_phi3_longrope_seq_cls

    path = build_phi3_longrope_seq_cls(tmp_path / "phi3", switch=200)
    model, tok = load_reference(path, "seq-cls")
    words = "mars red planet iron oxide sun moon rice water library".split()
    long_item = " ".join(words[k % 10] for k in range(400))
    fits = tok(long_item, add_special_tokens=False).input_ids[:190]
    rows = [
        {"id": 0, "query_ids": tok("which planet is red").input_ids, "item_ids": [fits[:5], fits]},
        {"id": 1, "query": "a rice question", "items": ["rice in water", "the library"]},
    ]
    for mode in ("mis", "single"):
        _, scores, hidden = scorer_outputs(path, rows, mode=mode, max_batch_tokens=4096)
        assert_matches(rows, reference_rows(model, tok, "seq-cls", rows), scores, hidden)
    long_row = raw_rows([{"query": "q", "items": ["a", long_item]}])
    table = Scorer(path, device="cpu", skip_bad_rows=True, truncate="error").score_rows(long_row)
    assert table["score"].to_pylist() == [None] and "exceed --max-seq-len 200" in table["error"].to_pylist()[0]
    # --truncate item (the default): the long item is cut at the switch, and the short one beside it stays exact
    # (run past the switch, the pair would take the long factors, and the short item's score with them)
    p, a = tok("q").input_ids, tok("a", add_special_tokens=False).input_ids
    cut = tok(long_item, add_special_tokens=False).input_ids[: 200 - len(p)]
    ref = [reference_rows(model, tok, "seq-cls", [{"query_ids": p, "item_ids": [a, cut]}])[0][0]]
    for mode in ("mis", "single"):
        table = Scorer(path, device="cpu", mode=mode, max_batch_tokens=4096).score_rows(long_row)
        np.testing.assert_allclose(np.array(table["scores"].to_pylist()[0]), ref[0], atol=1e-4, rtol=0)
    with pytest.raises(UsageError, match="LongRoPE"):
        Scorer(path, device="cpu", max_seq_len=300)


@pytest.mark.parametrize("query", ["", "what is up"])
def test_cls_pooling_in_mis_reads_each_items_first_token_where_the_prefix_is_empty(qwen3_seq_cls, query):
    """--pooling cls reads a sequence's first token: the prefix's where there is one, else each
    item's own (no BOS, an empty query) — in MIS as in single-item scoring, never item 0's."""
    rows = [{"query": query, "items": ["the first item here", "x", "a third one"]}]
    _, s_mis, h_mis = scorer_outputs(qwen3_seq_cls, rows, mode="mis", pooling="cls")
    _, s_one, h_one = scorer_outputs(qwen3_seq_cls, rows, mode="single", pooling="cls")
    np.testing.assert_allclose(s_mis[0], s_one[0], atol=1e-5, rtol=0)
    np.testing.assert_allclose(h_mis[0], h_one[0], atol=1e-4, rtol=0)
