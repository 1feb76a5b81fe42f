"""Start-up self-check: scorecli's scores of a probe row against the model's own forward.

A decoder runs under scorecli's attention backends, packing and heads. A feature of a new
architecture that they do not reproduce (an attention argument, a logit transform, a layer
that is not what it seems) would make every score of the run silently wrong. So before
scoring, a Scorer scores one probe row (a short query and two items) in its own mode and
backend, and compares every item with the model's own forward over query + item, run by
transformers with its eager attention. A difference beyond the dtype's tolerance stops the
run (`SelfCheckError`); `--no-self-check` skips the check. Cross-encoders are checked when they
run scorecli's fused encoder (BERT family), against the loaded model's own forward of each
(query, item) pair; otherwise they run the model's own forward and need no check. This module
knows nothing about files or the CLI.
"""

from __future__ import annotations

import numpy as np
import torch

from scorecli.errors import ScorecliError
from scorecli.heads import activate
from scorecli.io.readers import RawRow

PROBE_QUERY = "Which planet is known as the red planet?"
PROBE_ITEMS = (" Mars is called the red planet.", " Bananas grow in clusters and are rich in potassium.")
# largest difference allowed, relative to the largest reference score of the probe: float32
# attention agrees with the model's to ~1e-6; 16-bit attention (and flashinfer's kernels, which
# run float32 models in float16) only to its rounding, so there only gross errors are caught
TOLERANCE_FP32 = 1e-3
TOLERANCE_16BIT = 0.1


class SelfCheckError(ScorecliError):
    """scorecli's scores differ from the model's own forward."""


def self_check(scorer) -> float | None:
    """Score the probe row with `scorer` and with the model's own forward.

    Returns:
        the largest difference, relative to the largest reference score (None: the model's
        longest sequence cannot hold the probe's query and an item token).
    Raises:
        SelfCheckError: it exceeds the tolerance.
    """
    tok, loaded = scorer.loaded.tokenizer, scorer.loaded
    if scorer.spec.kind == "cross-encoder":
        items = [item.strip() for item in PROBE_ITEMS]
        if len(tok(PROBE_QUERY, items[0])["input_ids"]) > scorer.spec.max_seq_len:
            return None  # the probe's pairs do not fit whole
        row = {scorer.fields.query: PROBE_QUERY, scorer.fields.items: items}
        theirs_of = lambda item: _pair_reference(scorer, item)  # noqa: E731
    else:
        query = tok(PROBE_QUERY).input_ids
        room = scorer.spec.max_seq_len - len(query)  # items cut to fit beside the query, never truncated by the run
        if room < 1:
            return None
        items = [tok(item, add_special_tokens=False).input_ids[:room] for item in PROBE_ITEMS]
        row = {"query_ids": query, "item_ids": items}
        theirs_of = lambda item: _reference(scorer, query + item)  # noqa: E731
    table = scorer.score_rows([RawRow(row, "self-check probe")])
    n_labels = len(scorer.spec.label_names)
    ours = np.array(table["scores"].to_pylist()[0], dtype=np.float64).reshape(len(items), n_labels)
    theirs = np.stack([theirs_of(item) for item in items])
    if not np.isfinite(theirs).all():
        raise SelfCheckError(
            f"self-check: the model's own forward of {loaded.path} gives NaN or infinite scores on the probe "
            f"({str(loaded.dtype).removeprefix('torch.')}): its weights or this dtype overflow, not scorecli; "
            "try --dtype float32 or another checkpoint"
        )
    scale = max(float(np.abs(theirs).max()), 1e-30)
    error = float(np.abs(ours - theirs).max()) / scale
    exact = loaded.dtype == torch.float32 and scorer.backend_name != "flashinfer"
    tolerance = TOLERANCE_FP32 if exact else TOLERANCE_16BIT
    if not error <= tolerance:  # NaN fails too
        raise SelfCheckError(
            f"self-check: scorecli's scores for {loaded.path} differ from the model's own forward by "
            f"{error:.2g} (relative; tolerance {tolerance:g}): this architecture needs something scorecli does not "
            "reproduce; please report it. --no-self-check scores anyway"
        )
    return error


@torch.inference_mode()
def _pair_reference(scorer, item: str) -> np.ndarray:
    """A cross-encoder's own scores [labels] for (probe query, item): the loaded model's forward
    (scorecli's fused encoder runs in a view of it)."""
    tok, spec = scorer.loaded.tokenizer, scorer.spec
    enc = tok(PROBE_QUERY, item, truncation="only_second", max_length=spec.max_seq_len, return_tensors="pt")
    out = scorer.loaded.model(**enc.to(scorer.loaded.device))
    return activate(out.logits[0], spec.activation).double().cpu().numpy()


@torch.inference_mode()
def _reference(scorer, ids: list[int]) -> np.ndarray:
    """The model's own scores [labels] for one sequence, under transformers' eager attention."""
    from scorecli.attention import ATTN_NAME

    model, spec = scorer.loaded.model, scorer.spec
    model.set_attn_implementation("eager")
    try:
        out = model(input_ids=torch.tensor([ids], device=scorer.loaded.device), use_cache=False)
    finally:
        model.set_attn_implementation(ATTN_NAME)
    if spec.kind != "causal-lm":
        return activate(out.logits[0], spec.activation).double().cpu().numpy()
    logits = out.logits[0, -1].float()  # [vocab]
    labels = torch.tensor(spec.label_ids, device=logits.device)
    if spec.activation == "none":
        return torch.exp(torch.log_softmax(logits, dim=-1))[labels].double().cpu().numpy()
    return activate(logits[labels], spec.activation).double().cpu().numpy()
