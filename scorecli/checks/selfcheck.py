"""Start-up self-check: scorecli's scores of probe rows against the model's own forward.

A decoder runs under scorecli's attention backends, packing and heads. A feature of a new
architecture that they do not reproduce (an attention argument, a logit transform, a layer
that is not what it seems) would make every score of the run silently wrong; `compat` refuses
what it can recognise at load, and this check is the net behind it. Before scoring, a Scorer
scores two probe rows that look like real work, in its own mode and backend: one batch holding
at least two sequences (so leakage between packed or ragged sequences shows), items of very
different lengths, a packed row of ~130 tokens (longer than the sliding windows of small
models: a window counted in packed positions shows). Every item's score and its last hidden
state are compared with the model's own forward over query + item, run by transformers with
its eager attention. A difference beyond the dtype's tolerance stops the run
(`SelfCheckError`); `--no-self-check` skips the check. Cross-encoders are checked when they
run scorecli's fused encoder (BERT family), against the loaded model's own forward of each
(query, item) pair; otherwise they run the model's own forward and need no check. Embedding
models embed a probe row (items of very different lengths) in the run's own batches; every
similarity and item embedding is compared with each text run alone through the model's own
forward (eager attention for decoders), pooled text by text; speed-ups around the model (compiled
layers, fused norms) are paused for the reference, and blamed for a failure only when the check
passes without them (`failing_speedups`). Which probe a run gets is its
kind's choice (`kinds`, `probe_errors`), and the probes themselves are the kinds'
(`kinds.probes`): this module holds the probe texts, the tolerances and the verdict. It knows
nothing about files or the CLI.
"""

from __future__ import annotations

import numpy as np

from scorecli.attention.backends import float32_exact
from scorecli.core.batching import collate
from scorecli.errors import ScorecliError
from scorecli.runtimes import all_paused
from scorecli.runtimes.route import Routed

PROBE_QUERY = "Which planet is known as the red planet?"
PROBE_ITEMS = (" Mars is called the red planet.", " Bananas grow in clusters and are rich in potassium.")
# text the decoder probe's token ids are cut from
PROBE_TEXT = (
    " Mars is the fourth planet from the Sun and is called the red planet because of the iron oxide on its"
    " surface. Bananas grow in clusters and are rich in potassium; they ripen after they are picked. The"
    " library opens at nine on weekdays, and the museum next to it keeps a collection of old maps, coins and"
    " paintings. A train leaves the station every twenty minutes, except on Sundays, when the schedule changes."
    " Rice is cooked in twice its volume of water until the water is absorbed, then left to rest for ten minutes."
)
# decoder probe rows: (query tokens, item tokens...), cut to fit the run's --max-seq-len
PROBE_ROWS = ((12, (2, 24, 40, 56)), (6, (1, 12)))
# largest difference allowed, relative to the largest reference value of the probe (scores and
# hidden states apart): float32 attention agrees with the model's to ~1e-6; 16-bit attention (and
# flashinfer's kernels, which run float32 models in float16) only to its rounding, so there only
# gross errors are caught
TOLERANCE_FP32 = 1e-3
TOLERANCE_16BIT = 0.1


class SelfCheckError(ScorecliError):
    """scorecli's scores differ from the model's own forward."""


def self_check(scorer) -> float | None:
    """Score the probe rows with `scorer` and with the model's own forward.

    Returns:
        the largest difference, relative to the largest reference value (scores and hidden
        states apart); None when a cross-encoder's probe pair does not fit --max-seq-len.
    Raises:
        SelfCheckError: it exceeds the tolerance.
    """
    import torch  # the scorer's: this module's probe texts and verdicts are read without it (`checks.drift`)

    loaded = scorer.loaded
    errors = scorer.family.probe_errors(scorer)  # what each kind compares against
    if errors is None:
        return None  # the probe does not fit whole
    exact = loaded.dtype == torch.float32 and float32_exact(scorer.backend_name)
    tolerance = TOLERANCE_FP32 if exact else TOLERANCE_16BIT
    what, error = max(errors.items(), key=lambda kv: kv[1] if kv[1] == kv[1] else np.inf)
    if not error <= tolerance:  # NaN fails too
        raise SelfCheckError(
            f"self-check: scorecli's {what} for {loaded.path} differ from the model's own forward by "
            f"{error:.2g} (relative; tolerance {tolerance:g}): this architecture needs something scorecli does not "
            "reproduce; please report it. --no-self-check scores anyway"
        )
    return error


def failing_speedups(scorer) -> tuple:
    """After a failed check: the speed-ups around the model (compiled layers, fused norms) when the
    check passes with them paused, i.e. they made it fail; else () (the backend or the model did)."""
    active = tuple(x for x in scorer.family.speedups if x.active)
    if not active:
        return ()
    with all_paused(active):
        try:
            self_check(scorer)
        except SelfCheckError:
            return ()
    return active


def relative_error(ours: np.ndarray, theirs: np.ndarray) -> float:
    return float(np.abs(ours - theirs).max()) / max(float(np.abs(theirs).max()), 1e-30)


def open_routed(scorer, seqs: list, batches: list[np.ndarray], shared: int) -> None:
    """Before a window's batches run: make each runtime `--runtime auto` routes one of them to that
    is not made yet (`runtimes.route.Pending`: torch's forward of a model not built,
    `model.remembered`). Its results on the first such batch (`seqs` of `batches`, past a prefix of
    `shared` tokens) are compared with the runtime's that passed the start-up self-check: a
    difference beyond the tolerance stops the run (`SelfCheckError`) before the window runs."""
    forward = getattr(scorer.family, "forward", None)
    if not isinstance(forward, Routed) or not forward.pending:
        return
    for index in batches:
        name = forward.runtime_for(max(seqs[i].length for i in index))
        if name in forward.pending:
            batch = collate([seqs[i] for i in index], shared)
            forward.open(name, lambda made, batch=batch, name=name: _agrees(scorer, forward, name, made, batch))


def _agrees(scorer, routed, name: str, made, batch) -> None:
    """`made` (runtime `name`'s forward) against the routed forward's runtime that is made, on `batch`."""
    import torch

    if not scorer.config.self_check:
        return
    other = next(n for n in routed.forwards if n != name and n not in routed.pending)
    with torch.inference_mode():
        ours = scorer.family.score_batch(batch, made).double().cpu().numpy()
        theirs = scorer.family.score_batch(batch, routed.forwards[other]).double().cpu().numpy()
    error = relative_error(ours, theirs)
    if not error <= TOLERANCE_FP32:  # NaN fails too
        raise SelfCheckError(
            f"self-check: scorecli's {name} forward for {scorer.loaded.path} differs from {other}'s, which passed the "
            f"self-check, by {error:.2g} on a batch of sequences of up to {batch.max_len} tokens (relative; tolerance "
            f"{TOLERANCE_FP32:g}); --runtime {other} scores without it"
        )
