"""The check a Scorer runs at start-up, before its first window (docs/models.md): the self-check's
probe against the model's own forward (`selfcheck`) for an exact run, the drift of an
approximate runtime (`drift`) otherwise, and what a failure leads to. Knows nothing about
files or the CLI.
"""

from __future__ import annotations

from scorecli.checks.drift import measure_drift
from scorecli.checks.selfcheck import SelfCheckError, failing_speedups, self_check
from scorecli.runtimes import runtime_info


def start_up_check(scorer) -> str:
    """The start-up check a Scorer runs before its first window, when it applies: this module's
    probe (an exact run), or the drift of an approximate runtime (`drift`), measured and kept
    (`scorer.drift`), not judged. A failed check puts back a speed-up the run chose that it
    blames (`failing_speedups`), else switches `--attention auto`'s choice to its fallback, and
    checks again; what the user asked for fails (`SelfCheckError`). Its outcome, for the metadata."""
    if not scorer.config.self_check:
        return "off"
    if not scorer.family.needs_check:
        return "not needed (the model's own forward)"
    if runtime_info(scorer.runtime).approximate:  # drift measured and recorded, not judged
        scorer.drift = measure_drift(scorer)
        return scorer.drift.note
    try:
        scorer.self_check_error = self_check(scorer)  # raises SelfCheckError on a mismatch
    except SelfCheckError as err:
        culprits = failing_speedups(scorer)
        if culprits and not any(x.strict for x in culprits):  # a speed-up the run chose: put back
            for speedup in culprits:
                speedup.restore(f"{speedup.name} failed the self-check ({err})")
        elif culprits or scorer.fallback is None:  # the one the user asked for, or nothing to switch to
            raise
        else:
            scorer.fall_back(err)  # `auto` chose a backend that scores this model wrongly
        return start_up_check(scorer)
    if scorer.self_check_error is None:
        return "skipped (no room for the probe)"
    return f"passed (max relative difference {scorer.self_check_error:.2g})"
