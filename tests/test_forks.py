"""MIS for families a mask alone cannot pack (`scorecli.forks`): exact, and a leak is caught.

Each family's tiny seeded model scores rows whose prefixes and items are 0, 1, 2, 3, 4 (around
a convolution width of 4), 17 and 200 tokens long, in MIS and single-item mode; every score
must equal the model's own eager forward over P + I_k (<= 1e-4; pooled hidden states <= 1e-3)
and MIS must equal single. Two recurrent families also run MIS on flex's ragged row. A fork whose
items share a state stream (the leak sglang issue #31969 was) must fail the same check.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

from scorecli import Scorer
from tests.builders.families import Unbuildable, _tiny_model, build_family, tokenizer
from tests.test_invariance import raw_rows, table_outputs

RECURRENT = ["qwen3_next", "qwen3_5_text", "jamba", "zamba", "zamba2", "minimax"]
OWN_ATTENTION = ["openai-gpt", "bloom", "mpt", "falcon", "falcon-alibi", "gpt_neo"]
# the default tiny Falcon uses rotary positions; MiniMax's attention window (none in its
# released configs) would cut the 200-token items (its sequence limit, which the window caps)
RAGGED = ["qwen3_next", "minimax"]  # the ragged row's layout (the adapters see gathered blocks either way)
VARIANTS = {"falcon-alibi": ("falcon", {"alibi": True}), "minimax": ("minimax", {"sliding_window": None})}

LENGTHS = (0, 1, 2, 3, 4, 17, 200)
SHORT = LENGTHS[:-1]
# every prefix length with every short item, and 200-token items after prefixes of 0, 3 and 17
# (each 200-token sequence costs a Mamba scan 200 steps: the file stays within minutes)
SHAPES = [(q, SHORT + ((200,) if q in (0, 3, 17) else ())) for q in LENGTHS]
_RNG = np.random.default_rng(1)
ROWS = [
    {
        "query_ids": _RNG.integers(5, 1000, size=q).tolist(),
        "item_ids": [_RNG.integers(5, 1000, size=n).tolist() for n in items if q or n],  # no empty P + I
    }
    for q, items in SHAPES
]


@functools.cache
def _path(name: str, root: str) -> str:
    model_type, variant = VARIANTS.get(name, (name, None))
    try:
        if variant is None:
            return build_family(model_type, f"{root}/{name}")
        from tests.builders.models import _save

        return _save(_tiny_model(model_type, variant), tokenizer(), f"{root}/{name}")
    except Unbuildable as exc:
        pytest.fail(f"{name} no longer builds small: {exc}")


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> str:
    return str(tmp_path_factory.getbasetemp() / "forks")


# transformers 5.24's eager Falcon adds ALiBi twice (to the logits, and folded into its mask), its
# sdpa path once, as Falcon's own code did; Falcon cannot switch implementations once loaded, so
# scorecli runs what it loads with (sdpa), and so does the reference
SDPA_REFERENCE = {"falcon-alibi"}


@functools.cache
def _reference(path: str) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per row: the model's own forward over each P + I_k (eager attention, except
    `SDPA_REFERENCE`): (scores, last hidden state)."""
    from transformers import AutoModelForSequenceClassification

    attn = "sdpa" if path.rsplit("/", 1)[-1] in SDPA_REFERENCE else "eager"
    model = AutoModelForSequenceClassification.from_pretrained(path, attn_implementation=attn).eval()
    out = []
    with torch.inference_mode():
        for row in ROWS:
            runs = [
                model(input_ids=torch.tensor([row["query_ids"] + item]), output_hidden_states=True, use_cache=False)
                for item in row["item_ids"]
            ]
            scores = np.stack([r.logits[0].float().numpy() for r in runs])
            out.append((scores, np.stack([r.hidden_states[-1][0, -1].float().numpy() for r in runs])))
    return out


def _scored(path: str, **kw) -> tuple[Scorer, list[np.ndarray], list[np.ndarray]]:
    """Scored on the CPU in float32 unless `kw` says otherwise (where CUDA is present a Scorer's
    default device is the GPU, in bfloat16)."""
    kw = {"device": "cpu", "dtype": "float32", **kw}
    scorer = Scorer(path, pooled_hidden_states=True, self_check=False, **kw)
    _, scores, hidden = table_outputs(scorer.score_rows(raw_rows(ROWS)))
    return scorer, scores, [h.reshape(len(s), -1) for h, s in zip(hidden, scores)]


def _errors(path: str, scores, hidden) -> tuple[float, float]:
    ref = _reference(path)
    return (
        max(float(np.abs(s - r).max()) for s, (r, _) in zip(scores, ref)),
        max(float(np.abs(h - r).max()) for h, (_, r) in zip(hidden, ref)),
    )


@pytest.mark.parametrize("name", RECURRENT + OWN_ATTENTION)
def test_mis_equals_single_equals_the_models_own_forward(name, root):
    path = _path(name, root)
    runs = {mode: _scored(path, mode=mode, attention="sdpa") for mode in ("mis", "single")}
    if name in RAGGED:
        runs["mis/flex"] = _scored(path, mode="mis", attention="flex")
    assert runs["mis"][0].metadata["mode"] == "mis" and runs["mis"][0].metadata["mode_reason"] == ""
    if name in RECURRENT:  # `inspect` says so from the config and module types alone (it said single-item only)
        assert "multi-item:     yes (MIS by default: the prefix runs once" in "\n".join(_described(path))
    for what, (_, scores, hidden) in runs.items():
        score_err, hidden_err = _errors(path, scores, hidden)
        assert score_err <= 1e-4 and hidden_err <= 1e-3, (name, what, score_err, hidden_err)
    mis, single = runs["mis"][1], runs["single"][1]
    assert max(float(np.abs(a - b).max()) for a, b in zip(mis, single)) <= 1e-4


@pytest.mark.parametrize("name", ["jamba", "zamba"])
def test_the_kernel_paths_state_correction_is_exact(name, root, monkeypatch):
    """Where a scan kernel runs (CUDA), a Mamba-1 item scans from zero and its prefix state's
    part is added afterwards (`forks.mamba1.scan_from`): the same path on the CPU, held to the
    model's own forward."""
    from scorecli.forks import mamba1

    path = _path(name, root)
    monkeypatch.setattr(mamba1, "LOOP_DEVICES", set())
    _, scores, hidden = _scored(path, mode="mis", attention="sdpa")
    score_err, hidden_err = _errors(path, scores, hidden)
    assert score_err <= 1e-4 and hidden_err <= 1e-3, (name, score_err, hidden_err)


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@CUDA
@pytest.mark.parametrize("name", RECURRENT + OWN_ATTENTION)
def test_on_cuda_in_float32_mis_and_single_equal_the_models_own_forward(name, root):
    """The same rows on a GPU in float32 (with the kernels transformers finds there, or its torch
    paths): MIS and single within 1e-4 of the model's own forward on the CPU. Uncompiled: a library
    Scorer, whose job size is unknown, compiles a decoder's layers on CUDA under `--compile auto`,
    and inductor's first compile of each family ran past 100 s on an H200 (2026-11-27 18:36)."""
    path = _path(name, root)
    for mode in ("mis", "single"):
        kw = {"attention": "sdpa", "device": "cuda", "dtype": "float32", "compile": "off"}
        scorer, scores, hidden = _scored(path, mode=mode, **kw)
        assert scorer.loaded.device.type == "cuda" and scorer.metadata["mode"] == mode
        score_err, hidden_err = _errors(path, scores, hidden)
        assert score_err <= 1e-4 and hidden_err <= 1e-3, (name, mode, score_err, hidden_err)


def test_a_chunked_mixers_items_run_in_runs_of_whole_blocks():
    """Items padded to whole blocks of a chunked scan run in runs that take as many blocks each:
    32 items of 150-192 tokens and 8 of 193-200 run as two runs (not all 40 at 4 blocks of 64);
    a run that would save less than one item's block (the cost of a call) joins its neighbour;
    every item runs once, each run in length order and as wide as its longest item."""
    from scorecli.forks.layout import _groups

    rng = np.random.default_rng(0)
    lens = rng.permutation(np.concatenate([rng.integers(150, 193, 32), rng.integers(193, 201, 8)]))
    runs = _groups(lens, 64, torch.device("cpu"))
    assert [len(rows) for rows, _ in runs] == [32, 8]
    rows = np.concatenate([r.numpy() for r, _ in runs])
    assert sorted(rows.tolist()) == list(range(40)) and (np.diff(lens[rows]) >= 0).all()
    assert [w for _, w in runs] == [int(lens[lens <= 192].max()), int(lens.max())]
    # one item of one block beside ten of two: apart 1 + 1 + 20 + 1 blocks, together 11 x 2 + 1
    assert _groups(np.array([60] + [70] * 10), 64, torch.device("cpu")) == [(None, 70)]
    assert _groups(np.array([3, 17, 1]), 64, torch.device("cpu")) == [(None, 17)]


def test_the_mamba_loop_runs_each_item_only_over_its_own_tokens():
    """`forks.mamba1._loop_from` with lengths (longest first) gives each sequence the outputs and
    final state of its own loop over its real tokens alone, from its own state (the padding after
    a shorter item never reaches its state)."""
    from scorecli.forks.mamba1 import _loop_from

    g = torch.Generator().manual_seed(0)
    b, d, n, steps = 4, 6, 3, 7
    lens = np.array([7, 5, 5, 1])
    x, dt, z = (torch.randn(b, d, steps, generator=g) for _ in range(3))
    B, C = (torch.randn(b, n, steps, generator=g) for _ in range(2))
    A, D, bias, h0 = -torch.rand(d, n, generator=g), torch.randn(d, generator=g), torch.randn(d), torch.randn(b, d, n)
    y, last = _loop_from(x, dt, A, B, C, D, z, bias, h0, lens)
    for i, k in enumerate(lens):
        alone = [t[i : i + 1, ..., :k] for t in (x, dt, B, C, z)]
        y1, last1 = _loop_from(alone[0], alone[1], A, alone[2], alone[3], D, alone[4], bias, h0[i : i + 1])
        torch.testing.assert_close(y[i : i + 1, :, :k], y1, rtol=0, atol=1e-6)
        torch.testing.assert_close(last[i : i + 1], last1, rtol=0, atol=1e-6)


def _leaking(layout_of):
    """`ForkLayout.of` whose items of a sequence run as one stream: each item starts from the
    state the item before it ended in, not from its prefix's."""
    from scorecli.forks.layout import ForkLayout

    def of(batch, padded, device):
        lay = layout_of(batch, padded, device)
        index, mask, seqs = (t.cpu().numpy() for t in (lay.item_index, lay.item_mask, lay.item_seq))
        streams = [np.concatenate([index[k][mask[k]] for k in np.flatnonzero(seqs == s)]) for s in np.unique(seqs)]
        width = max(len(s) for s in streams)
        leak_index = np.zeros((len(streams), width), dtype=np.int64)
        leak_mask = np.zeros((len(streams), width), dtype=bool)
        for r, s in enumerate(streams):
            leak_index[r, : len(s)], leak_mask[r, : len(s)] = s, True
        seg, pos = (None if t is None else t.cpu().numpy() for t in (lay.segment, lay.positions))
        prefix = (lay.prefix_index.cpu().numpy(), lay.prefix_mask.cpu().numpy())
        return ForkLayout.upload(*prefix, leak_index, leak_mask, np.unique(seqs), seg, pos, lay.max_position, device)

    return staticmethod(of)


@pytest.mark.parametrize("name", ["qwen3_next", "jamba"])
def test_a_fork_whose_items_share_state_is_caught(name, root, monkeypatch):
    """The check above fails for a fork that lets one item's state reach the next."""
    from scorecli.forks.layout import ForkLayout

    path = _path(name, root)
    monkeypatch.setattr(ForkLayout, "of", _leaking(ForkLayout.of))
    _, scores, hidden = _scored(path, mode="mis", attention="sdpa")
    score_err, _ = _errors(path, scores, hidden)
    assert score_err > 1e-3, score_err
    monkeypatch.undo()
    _, scores, hidden = _scored(path, mode="mis", attention="sdpa")
    assert _errors(path, scores, hidden)[0] <= 1e-4


def test_own_attention_families_refuse_ragged_backends_with_the_reason(root):
    """ALiBi and the MIS mask are built over padded sequences: flex is refused in one line, and
    `--attention auto` runs sdpa."""
    from scorecli.errors import UsageError

    path = _path("bloom", root)
    with pytest.raises(UsageError, match=r"BloomAttention\) adds its own masks and position biases"):
        Scorer(path, attention="flex")
    scorer = Scorer(path)
    assert scorer.metadata["mode"] == "mis" and scorer.backend_name == "sdpa" and not scorer.shares_prefix


def test_a_family_no_fork_covers_stays_single_item_with_the_reason(root, monkeypatch):
    """Unregister the gated delta-net: Qwen3-Next is single-item only again, and says why."""
    from scorecli import forks
    from scorecli.errors import UsageError

    path = _path("qwen3_next", root)
    monkeypatch.setattr(forks, "MIXERS", {k: v for k, v in forks.MIXERS.items() if "GatedDeltaNet" not in k})
    scorer = Scorer(path)
    assert scorer.metadata["mode"] == "single" and "carries state from token to token" in scorer.metadata["mode_reason"]
    with pytest.raises(UsageError, match="carries state from token to token"):
        Scorer(path, mode="mis")
    assert "multi-item:     no: single-item only (layer 0" in "\n".join(_described(path))


def _described(path: str) -> list[str]:
    from scorecli.inspect import describe

    return describe(path, None, trust_remote_code=False)


def test_a_mixer_whose_cache_this_package_cannot_stand_in_for_leaves_the_model_single_item(root, monkeypatch):
    """A transformers whose mixer takes its cache under a name `forks.mixers` does not know: no
    fork, so `--mode auto` scores one item at a time, exactly, and says why."""
    from scorecli.forks import mixers

    path = _path("qwen3_next", root)
    monkeypatch.setattr(mixers, "cache_keyword", lambda module: None)
    scorer, scores, hidden = _scored(path, attention="sdpa")
    assert scorer.metadata["mode"] == "single" and "state" in scorer.metadata["mode_reason"]
    score_err, hidden_err = _errors(path, scores, hidden)
    assert score_err <= 1e-4 and hidden_err <= 1e-3, (score_err, hidden_err)
