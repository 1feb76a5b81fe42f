"""Ranking metrics of scored rows against relevance labels (docs/inputs-and-metrics.md): MRR@k,
nDCG@k and accuracy@1, as trec_eval (pytrec_eval, ir_measures) computes them.

A row's labels are one number per item (a graded relevance, >= 0), or the indices of its relevant
items (each relevant with grade 1); a list as long as the row's items is read as grades.
Following trec_eval: items are ranked by score, best first; an item is relevant when its grade
is at least 1 (trec_eval's relevance level); nDCG's gain is the grade itself over log2(rank + 1),
divided by the DCG of the ideal order of the row's grades, both cut at k; accuracy@1 is P@1.
Ties (equal scores) go to the lower item index, as in the `top_k` column (trec_eval breaks them
by document name; the tests name items so that it does the same). A row without a relevant item
counts with 0 in every metric (trec_eval's value for a judged query with none); a row without
items, or whose scores are null (a bad row), does not count. Knows nothing about files or models.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from scorecli.core.cells import as_list
from scorecli.errors import InputError

RELEVANT = 1.0  # trec_eval's default relevance level: a grade at least this is relevant
DEFAULT_K = 10  # without --top-k


def parse_labels(value: Any, n_items: int, where: str, name: str) -> np.ndarray:
    """A row's labels as grades [n_items] float64 (see the module's docstring); CSV cells that
    hold a number as text are that number.

    Raises:
        InputError: labels that are not a list of numbers, a negative grade, or an index that
            is not one of the row's items (one line naming `where` and the field).
    """
    value = as_list(value, where, name)  # a CSV cell
    if not isinstance(value, list):
        raise InputError(f"{where}: field '{name}': expected a list (a grade per item, or relevant items' indices)")
    numbers = [_number(v, where, name) for v in value]
    if len(numbers) == n_items:
        grades = np.array(numbers, dtype=np.float64)
        if (grades < 0).any():
            bad = next(v for v in numbers if v < 0)
            raise InputError(f"{where}: field '{name}': grade {bad:g} is not a number >= 0")
        return grades
    grades = np.zeros(n_items, dtype=np.float64)
    for v in numbers:
        if v != int(v) or not 0 <= v < n_items:
            raise InputError(
                f"{where}: field '{name}': {v:g} is not an item index (the row has {n_items} items; "
                f"a list of {n_items} numbers would be a grade per item)"
            )
        grades[int(v)] = 1.0
    return grades


def _number(v: Any, where: str, name: str) -> float:
    """A label as a finite float: infinity, NaN (JSON's `1e999`, a CSV cell's `nan`, pandas' missing
    value) and an integer beyond float64 are bad rows, as text that is no number is."""
    number = v
    if isinstance(v, str):  # a CSV cell
        try:
            number = float(v)
        except ValueError:
            pass
    if isinstance(number, bool) or not isinstance(number, (int, float)):
        raise InputError(f"{where}: field '{name}': expected numbers, got {v!r:.40}")
    try:
        number = float(number)
    except OverflowError:  # an integer of hundreds of digits
        number = math.inf
    if not math.isfinite(number):
        raise InputError(f"{where}: field '{name}': {v!r:.40} is not a finite number")
    return number


def rank_order(scores: np.ndarray) -> np.ndarray:
    """Item indices best first: by score, ties to the lower index (as `core.ranking.top_k`); a NaN
    score last."""
    nan = np.isnan(scores)
    keyed = np.where(nan, 0.0, scores.astype(np.float64))  # NaN after every number, -inf included
    return np.lexsort((np.arange(len(scores)), -keyed, nan))


def row_metrics(scores: np.ndarray, grades: np.ndarray, k: int) -> tuple[float, float, float]:
    """(RR@k, nDCG@k, accuracy@1) of one row with items; trec_eval's definitions."""
    ranked = grades[rank_order(scores)]
    top = ranked[:k]
    hits = np.flatnonzero(top >= RELEVANT)
    rr = 1.0 / float(hits[0] + 1) if len(hits) else 0.0
    discount = 1.0 / np.log2(np.arange(2, len(top) + 2))
    ideal = np.sort(grades)[::-1][:k]
    idcg = float(np.sum(ideal * discount[: len(ideal)]))
    ndcg = float(np.sum(top * discount)) / idcg if idcg > 0 else 0.0
    return rr, ndcg, float(ranked[0] >= RELEVANT)


@dataclass
class Ranking:
    """Sums of per-row metrics over the labelled rows seen so far."""

    k: int = DEFAULT_K
    rows: int = 0
    without_relevant: int = 0
    sums: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])

    def add(self, scores: np.ndarray, grades: np.ndarray) -> None:
        if len(scores) == 0:
            return
        for j, value in enumerate(row_metrics(scores, grades, self.k)):
            self.sums[j] += float(value)
        self.rows += 1
        self.without_relevant += int(not (grades >= RELEVANT).any())

    def means(self) -> dict[str, float]:
        """{"MRR@k", "nDCG@k", "accuracy@1"}: means over the labelled rows (empty: none)."""
        if not self.rows:
            return {}
        names = (f"MRR@{self.k}", f"nDCG@{self.k}", "accuracy@1")
        return {name: total / self.rows for name, total in zip(names, self.sums)}

    def metadata(self) -> dict[str, str]:
        """The output's metadata: each mean in full precision, and the rows they are over."""
        means = self.means()
        if not means:
            return {}
        return {name: repr(value) for name, value in means.items()} | {
            "labelled_rows": str(self.rows),
            "labelled_rows_without_relevant": str(self.without_relevant),
        }

    def line(self) -> str:
        """For the summary line: `MRR@10 0.885, nDCG@10 0.901, accuracy@1 0.820 over 300 labelled rows`."""
        means = self.means()
        if not means:
            return ""
        shown = ", ".join(f"{name} {value:.4f}" for name, value in means.items())
        none = f", {self.without_relevant:,} without a relevant item" if self.without_relevant else ""
        return f"{shown} over {self.rows:,} labelled rows{none}"
