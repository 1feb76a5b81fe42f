"""The self-check of an approximate runtime (`--runtime onnx-int8`): drift measured, not judged.

int8 scores are expected to differ from the model's own float32 forward by more than the exact
self-check's tolerance, so an int8 run does not stop on a difference: it measures it on a probe
row and records it. The probe is the exact check's query with `DRIFT_ITEMS` (8 items of varied
relevance, so that 28 pairs of items can be ordered), scored by the run's own forward and by the
model's own torch forward (`Family.probe_scores`). Two figures, both in the output's metadata
and in a one-line note on stderr:
  - max score change: the largest |int8 score - torch score| over the probe's items and labels,
    in the units of the output's `scores` (after the activation);
  - pair order agreement: of the pairs of probe items the torch forward scores apart (`score`,
    the positive label), the fraction the int8 run orders the same way (ties count as
    disagreement); 1.0 is an identical ranking, 0.5 a random one.
NaN or infinite int8 scores still stop the run; so does a probe that does not fit --max-seq-len
(the drift would go unmeasured). Knows nothing about ONNX, files or the CLI.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scorecli.checks.selfcheck import PROBE_ITEMS, SelfCheckError
from scorecli.errors import UsageError

DRIFT_ITEMS = PROBE_ITEMS + (
    " Mars looks red because of the iron oxide dust on its surface.",
    " The red planet, Mars, has two small moons, Phobos and Deimos.",
    " Venus is the hottest planet of the solar system.",
    " Jupiter is the largest planet and has a great red spot.",
    " The library opens at nine on weekdays.",
    " Rice is cooked in twice its volume of water.",
)


MEASURED = "measured (int8-approximate): "  # how the metadata's `self_check` starts when drift was measured


def stderr_line(metadata: dict[str, str]) -> str | None:
    """The one-line note on stderr for a run whose output metadata records a measured drift
    (None: the run is exact). From the metadata, so the local engine and Ray's workers say the same."""
    outcome = metadata.get("self_check", "")
    if not outcome.startswith(MEASURED):
        return None
    return (
        f"note: --runtime {metadata.get('runtime')} scores are int8-approximate: on the self-check's probe, "
        f"{outcome.removeprefix(MEASURED)}; metadata self_check_*"
    )


@dataclass(frozen=True)
class Drift:
    """How far an approximate run's probe scores are from the model's own torch forward."""

    max_score_change: float
    same: int  # pairs of probe items ordered as the torch forward orders them
    pairs: int  # pairs of probe items the torch forward scores apart
    items: int

    @property
    def pair_agreement(self) -> float | None:
        """same / pairs; None when the torch forward scores every probe item alike."""
        return self.same / self.pairs if self.pairs else None

    def metadata(self) -> dict[str, str]:
        """The output metadata's keys (full precision)."""
        agreement = self.pair_agreement
        return {
            "self_check_max_score_change": repr(self.max_score_change),
            "self_check_pair_order_agreement": "n/a" if agreement is None else repr(agreement),
            "self_check_probe_items": str(self.items),
        }

    @property
    def note(self) -> str:
        """The metadata's `self_check` outcome (`stderr_line` reads it back)."""
        return f"{MEASURED}max score change {self.max_score_change:.3g}, {self._pairs}"

    @property
    def _pairs(self) -> str:
        if not self.pairs:
            return f"the torch forward scores the {self.items} probe items alike (no order to compare)"
        return (
            f"{self.same}/{self.pairs} pairs of the {self.items} probe items ordered as by the model's torch "
            f"forward (pair order agreement {self.pair_agreement:.3g})"
        )


def measure_drift(scorer) -> Drift:
    """Score the drift probe with `scorer` and with the model's own forward.

    Raises:
        SelfCheckError: the run's scores of the probe are NaN or infinite.
        UsageError: the probe does not fit --max-seq-len.
    """
    probe = scorer.family.probe_scores(scorer, DRIFT_ITEMS)
    if probe is None:
        raise UsageError(
            f"--runtime {scorer.config.runtime}: the self-check's probe does not fit --max-seq-len "
            f"{scorer.spec.max_seq_len}, so the int8 drift cannot be measured; raise --max-seq-len or "
            "use --runtime onnx"
        )
    ours, theirs = (np.asarray(a, dtype=np.float64).reshape(len(a), -1) for a in probe)  # [items, labels]
    if not np.isfinite(ours).all():
        raise SelfCheckError(
            f"self-check: --runtime {scorer.config.runtime} gives NaN or infinite scores on the probe "
            f"for {scorer.loaded.path}; use --runtime onnx"
        )
    k = scorer.spec.positive_index if ours.shape[1] > 1 else 0
    same, pairs = pairs_ordered_alike(ours[:, k], theirs[:, k])
    return Drift(float(np.abs(ours - theirs).max()), same, pairs, ours.shape[0])


def pairs_ordered_alike(ours: np.ndarray, theirs: np.ndarray) -> tuple[int, int]:
    """(how many of the pairs i < j that `theirs` scores apart `ours` orders the same way, how
    many pairs `theirs` scores apart)."""
    i, j = np.triu_indices(len(theirs), k=1)
    ref = np.sign(theirs[i] - theirs[j])
    apart = ref != 0
    return int((np.sign(ours[i] - ours[j])[apart] == ref[apart]).sum()), int(apart.sum())
