"""Every decoder family of transformers is exact or refused up front (never silently wrong).

The families are discovered from transformers' auto mappings (`tests.builders.families`), built tiny
and seeded, and scored in MIS and single mode on every CPU backend with the self-check off, so
that nothing but scorecli's up-front decisions (`scorecli.model.compat`) stands between a family and
a wrong score: each run either equals the model's own eager forward over P + I_k (<= 1e-4 on
scores, <= 1e-3 on pooled hidden states) or is refused with a one-line ScorecliError. A
default run (`--mode auto`, self-check on) must be exact for every family it accepts. A few
cases go through the console script.
"""

from __future__ import annotations

import functools
import subprocess

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from scorecli import Scorer
from scorecli.errors import ScorecliError
from tests.builders.families import Unbuildable, build_family, candidate_types
from tests.test_invariance import raw_rows, table_outputs

# pre-tokenized rows: items of very different lengths (one of a single token); every P + I_k fits
# the tiny models' 64-token windows while packed MIS rows cross them
_RNG = np.random.default_rng(0)
ROWS = [
    {
        "query_ids": _RNG.integers(5, 1000, size=q).tolist(),
        "item_ids": [_RNG.integers(5, 1000, size=n).tolist() for n in its],
    }
    for q, its in ((12, (30, 7, 40, 1, 22)), (25, (3, 35, 18)), (5, (50, 9, 28, 44)))
]
COMBOS = [(mode, attention) for mode in ("mis", "single") for attention in ("sdpa", "eager", "flex")]


@functools.cache
def _built(model_type: str, root: str) -> str:
    return build_family(model_type, f"{root}/{model_type}")


@pytest.fixture(scope="module")
def family(request, tmp_path_factory):
    """(model type, folder) of one family's tiny checkpoint, built once per session."""
    root = str(tmp_path_factory.getbasetemp() / "families")
    try:
        return request.param, _built(request.param, root)
    except Unbuildable as exc:
        pytest.skip(f"{request.param}: cannot be built small here: {exc}")


@functools.cache
def _reference(path: str) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per row: the model's own eager forward over each P + I_k: (scores [n, labels], hidden [n, H])."""
    from transformers import AutoModelForSequenceClassification

    model = AutoModelForSequenceClassification.from_pretrained(path, attn_implementation="eager").eval()
    out = []
    with torch.inference_mode():
        for row in ROWS:
            runs = [
                model(input_ids=torch.tensor([row["query_ids"] + item]), output_hidden_states=True, use_cache=False)
                for item in row["item_ids"]
            ]
            out.append(
                (
                    np.stack([r.logits[0].float().numpy() for r in runs]),
                    np.stack([r.hidden_states[-1][0, -1].float().numpy() for r in runs]),
                )
            )
    return out


def outcome(path: str, **kw) -> str:
    """'exact', 'refused: <one line>' or 'WRONG ...' for one scorecli run over ROWS."""
    return run(path, **kw)[0]


def run(path: str, **kw) -> tuple[str, Scorer | None]:
    """(outcome, the Scorer: None when refused) of one scorecli run over ROWS."""
    try:
        scorer = Scorer(path, pooled_hidden_states=True, **kw)
        _, scores, hidden = table_outputs(scorer.score_rows(raw_rows(ROWS)))
    except ScorecliError as exc:
        assert "\n" not in str(exc).strip(), f"a refusal must be one line: {exc}"
        return f"refused: {exc}", None
    ref = _reference(path)
    score_err = max(float(np.abs(s - r).max()) for s, (r, _) in zip(scores, ref))
    hidden_err = max(float(np.abs(h.reshape(r.shape) - r).max()) for h, (_, r) in zip(hidden, ref))
    if score_err <= 1e-4 and hidden_err <= 1e-3:
        return "exact", scorer
    return (
        f"WRONG (scores off by {score_err:.2g}, hidden states by {hidden_err:.2g}; mode {scorer.metadata['mode']})",
        scorer,
    )


@pytest.mark.parametrize("family", candidate_types(), indirect=True)
def test_family_is_exact_or_refused_up_front(family):
    """Self-check off: every mode and CPU backend is exact or refused by scorecli's own decisions."""
    model_type, path = family
    results = {
        f"{mode}/{attention}": outcome(path, mode=mode, attention=attention, self_check=False)
        for mode, attention in COMBOS
    }
    wrong = {k: v for k, v in results.items() if v.startswith("WRONG")}
    assert not wrong, f"{model_type}: silently wrong: {wrong}"


@pytest.mark.parametrize("family", candidate_types(), indirect=True)
def test_family_default_run_is_exact_or_refused(family):
    """A default run (mode auto, backend auto, self-check on): exact, or one refusal line; a model
    refused in MIS is run single-item, with the reason in the metadata."""
    model_type, path = family
    result, scorer = run(path)
    assert result == "exact" or result.startswith("refused"), f"{model_type}: {result}"
    if result == "exact":
        single_only = scorer.spec.single_reason != ""
        assert scorer.metadata["mode"] == ("single" if single_only else "mis")
        assert scorer.metadata["mode_reason"].startswith("single-item only: ") == single_only
        if single_only:
            assert not scorer.shares_prefix and scorer.backend_name == "sdpa"


def _family_path(tmp_path_factory, model_type: str) -> str:
    try:
        return _built(model_type, str(tmp_path_factory.getbasetemp() / "families"))
    except Unbuildable as exc:
        pytest.fail(f"{model_type} no longer builds small: {exc}")


@pytest.mark.parametrize("model_type", ["stablelm", "nemotron"])
def test_layers_that_do_not_hand_kwargs_down_are_exact(tmp_path_factory, model_type):
    """StableLM's and Nemotron's decoder layers call attention without `**kwargs`: the backend
    bound to the forward call (a context variable) still reaches it, in every mode and backend."""
    path = _family_path(tmp_path_factory, model_type)
    for mode, attention in COMBOS:
        assert outcome(path, mode=mode, attention=attention) == "exact", (mode, attention)


def test_single_item_only_models_refuse_packing_with_the_reason(tmp_path_factory, monkeypatch):
    """A layer no fork covers (`scorecli.forks`: here linear attention, and attention outside the
    backend, each with its adapter unregistered): auto runs single-item; MIS and a ragged backend
    are refused in one line that says why."""
    from scorecli import forks

    for model_type, why, table, key in (
        ("qwen3_next", "carries state from token to token", "MIXERS", "qwen3_next.Qwen3NextGatedDeltaNet"),
        ("openai-gpt", "does not go through scorecli's attention backend", "ATTENTIONS", "openai.Attention"),
    ):
        path = _family_path(tmp_path_factory, model_type)
        monkeypatch.setattr(forks, table, {k: v for k, v in getattr(forks, table).items() if k != key})
        scorer = Scorer(path)
        assert scorer.metadata["mode"] == "single" and why in scorer.metadata["mode_reason"]
        for kw in ({"mode": "mis"}, {"attention": "flex"}):
            with pytest.raises(ScorecliError, match=why):
                Scorer(path, **kw)
        monkeypatch.undo()
        assert Scorer(path).metadata["mode"] == "mis"  # forked again


def test_the_self_check_catches_a_family_compat_would_let_through(tmp_path_factory, monkeypatch):
    """The net behind the up-front decisions: were a state-carrying or backend-bypassing family
    let through in MIS, the start-up self-check stops it."""
    from scorecli.checks.selfcheck import SelfCheckError
    from scorecli.model import compat

    for model_type in ("qwen3_next", "openai-gpt"):
        path = _family_path(tmp_path_factory, model_type)
        monkeypatch.setattr(compat, "_support", lambda model: compat.Support(True))
        with pytest.raises(SelfCheckError):
            Scorer(path, mode="mis")
        monkeypatch.undo()


def _cli(*args: str) -> subprocess.CompletedProcess:
    from tests.test_cli import SCORECLI, _env

    return subprocess.run([*SCORECLI, *args], capture_output=True, text=True, env=_env(), timeout=180)


def _single_only_path(tmp_path_factory) -> str:
    """A tiny Bamba causal LM: its Mamba-2 mixer has no fork (`scorecli.forks`), so it runs single-item only."""
    from tests.builders.families import build_causal_family

    return _cached_causal("bamba", str(tmp_path_factory.getbasetemp() / "families"), build_causal_family)


@functools.cache
def _cached_causal(model_type: str, root: str, build) -> str:
    return build(model_type, f"{root}/{model_type}-causal")


@pytest.mark.e2e
def test_bench_on_a_single_item_only_model(tmp_path_factory):
    """`scorecli bench` with its default modes times single-item alone on a model that runs
    only that way, and says why; `--modes mis` asked for is refused as `score` refuses it."""
    import json

    path = _single_only_path(tmp_path_factory)
    common = [
        "bench",
        "--model",
        path,
        "--rows",
        "1",
        "--items",
        "2",
        "--query-tokens",
        "4",
        "--item-tokens",
        "3",
        "--repeats",
        "1",
    ]
    done = _cli(*common, "--json", "-")
    assert done.returncode == 0, done.stderr
    assert [(r["attention"], r["mode"]) for r in json.loads(done.stdout)["results"]] == [("sdpa", "single")]
    assert "scorecli bench: single-item mode only:" in done.stderr
    assert "carries state from token to token" in done.stderr
    refused = _cli(*common, "--modes", "mis")
    assert refused.returncode == 2 and "carries state from token to token" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr


@pytest.mark.e2e
def test_console_script_on_families(tmp_path_factory, tmp_path):
    """Through the real console script: a single-item-only family scores (exit 0, mode and why
    in the metadata and the summary); MIS on it, a family whose attention builds its own mask,
    one whose layers fail under scorecli's attention, and a ragged backend on one whose attention
    scorecli runs over padded sequences only: exit 2 with one line; inspect --check says which
    mode runs and why; a forked hybrid (Qwen3-Next) scores in MIS."""
    import json
    from concurrent.futures import ThreadPoolExecutor

    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"id": k, **row}) + "\n" for k, row in enumerate(ROWS)))
    doge, axk2, bloom, hybrid = (_family_path(tmp_path_factory, t) for t in ("doge", "axk2", "bloom", "qwen3_next"))
    linear = _single_only_path(tmp_path_factory)
    out = tmp_path / "out.parquet"
    labels = ["--label-token-ids", "5,6"]
    runs = [
        ["score", str(rows), "--out", str(out), "--model", linear, *labels],
        ["score", str(rows), "--out", str(tmp_path / "mis.parquet"), "--model", linear, "--mode", "mis", *labels],
        ["score", str(rows), "--out", str(tmp_path / "doge.parquet"), "--model", doge],
        ["score", str(rows), "--out", str(tmp_path / "axk2.parquet"), "--model", axk2],
        ["score", str(rows), "--out", str(tmp_path / "bloom.parquet"), "--model", bloom, "--attention", "flex"],
        ["inspect", linear, "--check"],
        ["score", str(rows), "--out", str(tmp_path / "hybrid.parquet"), "--model", hybrid],
    ]
    with ThreadPoolExecutor(len(runs)) as pool:
        ok, mis, own_mask, fails, bypass, inspect, forked = pool.map(lambda a: _cli(*a), runs)
    assert ok.returncode == 0, ok.stderr
    meta = pq.read_metadata(out).metadata
    assert meta[b"mode"] == b"single" and b"carries state from token to token" in meta[b"mode_reason"]
    assert "single-item only" in ok.stderr
    for proc, what in (
        (mis, "--mode mis"),
        (own_mask, "builds its own mask"),
        (fails, "do not run under"),
        (bypass, "(BloomAttention) adds its own masks and position biases"),
    ):
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert proc.returncode == 2 and len(lines) == 1 and what in lines[0], proc.stderr
    assert not (tmp_path / "mis.parquet").exists()
    assert inspect.returncode == 0, inspect.stderr
    assert "single-item only" in inspect.stdout and "carries state from token to token" in inspect.stdout
    assert forked.returncode == 0, forked.stderr
    assert pq.read_metadata(tmp_path / "hybrid.parquet").metadata[b"mode"] == b"mis"


def test_backend_for_a_single_item_only_model():
    """`--attention auto` picks a padded backend for it (never flashinfer's or flex's ragged
    row); an explicit ragged backend or MIS is refused; a packed model keeps its choice."""
    from scorecli.errors import UsageError
    from scorecli.model.compat import Support, backend_for

    single = Support(False, "layer 0 (mamba) carries state")
    assert backend_for(single, "auto", mis=False) == "sdpa"
    assert backend_for(single, "eager", mis=False) == "eager"
    for attention, mis in (("flex", False), ("flashinfer", False), ("sdpa", True)):
        with pytest.raises(UsageError, match="carries state"):
            backend_for(single, attention, mis)
    assert backend_for(Support(True), "auto", mis=True) == "auto"
    assert backend_for(Support(True), "flex", mis=True) == "flex"
