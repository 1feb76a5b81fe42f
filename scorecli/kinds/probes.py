"""The start-up self-check's probes, one per kind: scorecli's scores of the probe rows (run as the
run itself runs them) beside the model's own forward of each (query, item) text alone.

`checks.selfcheck` holds the probe texts, the tolerances and the verdict; each kind's family
calls its probe here (`probe_errors`, and `probe_scores` for an approximate runtime's drift).
Knows nothing about files or the CLI.
"""

from __future__ import annotations

import numpy as np
import torch

from scorecli.attention import ATTN_NAME, set_implementation
from scorecli.checks.selfcheck import PROBE_ITEMS, PROBE_QUERY, PROBE_ROWS, PROBE_TEXT, SelfCheckError, relative_error
from scorecli.core.rows import Row
from scorecli.io.readers import RawRow
from scorecli.kinds.heads import activate, logit_score
from scorecli.model.sentence import similarity
from scorecli.runtimes import all_paused
from scorecli.runtimes.route import each_runtime


def probe_rows(tok, max_seq_len: int) -> list[tuple[list[int], list[list[int]]]]:
    """The decoder probe: [(query ids, [item ids])], cut to fit `max_seq_len` (at least 2)."""
    query = tok(PROBE_QUERY + PROBE_TEXT).input_ids  # with the tokenizer's special tokens, as a run's prefix
    text = tok(PROBE_TEXT, add_special_tokens=False).input_ids
    text = text * (1 + max(n for _, items in PROBE_ROWS for n in items) // max(len(text), 1))
    rows = []
    for k, (q, items) in enumerate(PROBE_ROWS):
        ids = query[: min(q, max_seq_len - 1)]
        room = max_seq_len - len(ids)
        rows.append((ids, [text[7 * k + j : 7 * k + j + min(n, room)] for j, n in enumerate(items)]))
    return rows


def decoder_errors(scorer, rows) -> dict[str, float]:
    """Relative differences of the probe's scores and last hidden states (run in the scorer's
    own mode and backend, in one window) from the model's own forward."""
    raw = [
        RawRow({"query_ids": q, "item_ids": items}, f"self-check probe {k + 1}") for k, (q, items) in enumerate(rows)
    ]
    pooling, chunking = scorer.hidden_pooling, scorer.chunking
    scorer.hidden_pooling, scorer.chunking = "last", None  # the probe's items are scored whole
    try:
        table = scorer.score_rows(raw)
    finally:
        scorer.hidden_pooling, scorer.chunking = pooling, chunking
    n_labels = len(scorer.spec.label_names)
    ours_s = np.array([x for row in table["scores"].to_pylist() for x in row], dtype=np.float64).reshape(-1, n_labels)
    ours_h = np.array([x for row in table["pooled_hidden_states"].to_pylist() for x in row], dtype=np.float64)
    theirs = _references(scorer, [q + item for q, items in rows for item in items])
    theirs_s, theirs_h = np.stack([t[0] for t in theirs]), np.stack([t[1] for t in theirs])
    _finite(scorer, theirs_s)
    return {
        "scores": relative_error(ours_s, theirs_s),
        "hidden states": relative_error(ours_h.reshape(theirs_h.shape), theirs_h),
    }


def pair_errors(scorer) -> dict[str, float] | None:
    """Relative differences of the probe pairs' scores from the loaded model's own forward;
    None when the pairs do not fit --max-seq-len whole."""
    errors = []
    for _ in each_runtime(scorer.family.forward):  # both, where `auto` routes batches by length
        probe = pair_scores(scorer, PROBE_ITEMS)
        if probe is None:
            return None
        errors.append(relative_error(*probe))
    return {"scores": float(np.max(errors))}  # NaN stays NaN


def pair_scores(scorer, items: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray] | None:
    """(scorecli's, the loaded model's own) scores [items, labels] of the probe query paired with
    each of `items`; None when the first pair does not fit --max-seq-len whole."""
    items = [item.strip() for item in items]
    if len(scorer.loaded.tokenizer(PROBE_QUERY, items[0])["input_ids"]) > scorer.spec.max_seq_len:
        return None
    row = {scorer.fields.query: PROBE_QUERY, scorer.fields.items: items}
    encoder = scorer.family.encoder
    # the probe's items scored whole, cut to fit as its reference cuts them (`--truncate error` is
    # the user's rows' rule: a probe item over --max-seq-len is no bad input of theirs)
    kept = scorer.chunking, encoder.truncate
    scorer.chunking, encoder.truncate = None, "item"
    try:
        table = scorer.score_rows([RawRow(row, "self-check probe")])
    finally:
        scorer.chunking, encoder.truncate = kept
    n_labels = len(scorer.spec.label_names)
    ours = np.array(table["scores"].to_pylist()[0], dtype=np.float64).reshape(len(items), n_labels)
    theirs = np.stack([_pair_reference(scorer, item) for item in items])
    _finite(scorer, theirs)
    return ours, theirs


def embedding_errors(scorer) -> dict[str, float]:
    """Relative differences of the probe's similarities and item embeddings (the scorer's own
    batches, one window) from each text run alone through the model's own forward and pooled
    text by text (`_pool_one`)."""
    errors: dict[str, float] = {}
    for _ in each_runtime(scorer.family.forward):  # both, where `auto` routes batches by length
        for what, (ours, theirs) in embedding_probe(scorer, PROBE_ITEMS).items():
            errors[what] = float(np.maximum(errors.get(what, 0.0), relative_error(ours, theirs)))  # NaN stays NaN
    return errors


def embedding_probe(scorer, items: tuple[str, ...]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{"scores": (scorecli's, the model's own) similarities [items], "embeddings": the same of
    the item embeddings [items, D]} of the probe query and `items` + a long text."""
    family, items = scorer.family, [*items, PROBE_TEXT]  # items of very different lengths
    row = {scorer.fields.query: PROBE_QUERY, scorer.fields.items: items}
    pooling, truncate = scorer.hidden_pooling, family.encoder.truncate
    scorer.hidden_pooling, family.encoder.truncate = "embedding", "item"  # the probe's texts are cut to fit
    try:
        table = scorer.score_rows([RawRow(row, "self-check probe")])
        enc = family.encoder.encode([Row(PROBE_QUERY, items, None, None)], ["self-check probe"])[0]
    finally:
        scorer.hidden_pooling, family.encoder.truncate = pooling, truncate
    ours_s = np.array(table["score"].to_pylist()[0], dtype=np.float64)
    ours_e = np.array(table["pooled_hidden_states"].to_pylist()[0], dtype=np.float64)
    theirs = _embedding_references(scorer, [enc.query, *enc.items], [enc.skips[0]] + [enc.skips[1]] * len(enc.items))
    query = theirs[:1].expand(len(enc.items), -1)
    theirs_s = similarity(query, theirs[1:], scorer.spec.similarity).double().numpy()
    _finite(scorer, theirs_s)
    return {"scores": (ours_s, theirs_s), "embeddings": (ours_e, theirs[1:].double().numpy())}


@torch.inference_mode()
def _embedding_references(scorer, texts: list[np.ndarray], skips: list[int]) -> torch.Tensor:
    """[texts, D] float32 CPU: each text alone through the model's own forward (a decoder under
    transformers' eager attention), pooled, then the model's Dense and Normalize modules."""
    loaded = scorer.loaded
    modules, decoder = loaded.sentence, not loaded.is_encoder
    if decoder:
        set_implementation(loaded.model, "eager")
    try:
        with all_paused(scorer.family.speedups):  # its own norms, not fused ones
            out = []
            for ids, skip in zip(texts, skips):
                hidden = torch.from_numpy(_own_hidden(loaded, np.asarray(ids, dtype=np.int64))).to(loaded.device)
                pooled = torch.cat([_pool_one(hidden, min(skip, len(ids)), mode) for mode in modules.pooling])
                out.append(modules.after_pooling(pooled[None])[0].cpu())
            return torch.stack(out)
    finally:
        if decoder:
            set_implementation(loaded.model, ATTN_NAME)


def _own_hidden(loaded, ids: np.ndarray) -> np.ndarray:
    """[L, H] float32: the last hidden states of one text's token ids alone through the model's own
    forward (remembered for its weights where the model may not be built: `Loaded.own_output`)."""
    decoder = not loaded.is_encoder

    def compute(model) -> np.ndarray:
        x = torch.as_tensor(ids, device=loaded.device)[None]
        kwargs = {"use_cache": False} if decoder else {"attention_mask": torch.ones_like(x)}
        return model(input_ids=x, **kwargs).last_hidden_state[0].float().cpu().numpy()

    return loaded.own_output("last_hidden_state", {"input_ids": ids}, compute)


def _pool_one(hidden: torch.Tensor, skip: int, mode: str) -> torch.Tensor:
    """One text's pooled states [H] from its token states [L, H], the first `skip` left out."""
    kept, n = hidden[skip:], hidden.shape[0] - skip
    if mode == "cls":
        return hidden[skip if n > 0 else 0]
    if mode == "lasttoken":
        return hidden[-1] if n > 0 else torch.zeros_like(hidden[0])
    if mode == "max":
        return kept.max(dim=0).values if n > 0 else torch.full_like(hidden[0], float("-inf"))
    if mode == "weightedmean":
        weights = torch.arange(skip + 1, hidden.shape[0] + 1, dtype=hidden.dtype, device=hidden.device)[:, None]
        return (kept * weights).sum(dim=0) / max(float(weights.sum()), 1e-9)
    total = kept.sum(dim=0)
    return total / (max(n, 1e-9) if mode == "mean" else max(n, 1e-9) ** 0.5)


def _finite(scorer, theirs: np.ndarray) -> None:
    """NaN or infinite reference scores are the model's (its weights, or its dtype overflowing),
    not a difference scorecli could fix: say so."""
    if not np.isfinite(theirs).all():
        loaded = scorer.loaded
        raise SelfCheckError(
            f"self-check: the model's own forward of {loaded.path} gives NaN or infinite scores on the probe "
            f"({str(loaded.dtype).removeprefix('torch.')}): its weights or this dtype overflow, not scorecli; "
            "try --dtype float32 or another checkpoint"
        )


@torch.inference_mode()
def _pair_reference(scorer, item: str) -> np.ndarray:
    """A cross-encoder's own scores [labels] for (probe query, item): the loaded model's forward
    (scorecli's fused encoder runs in a view of it)."""
    loaded, spec = scorer.loaded, scorer.spec
    enc = loaded.tokenizer(
        PROBE_QUERY, item, truncation="only_second", max_length=spec.max_seq_len, return_tensors="np"
    )
    inputs = {name: np.asarray(value) for name, value in enc.items()}

    def compute(model) -> np.ndarray:  # its logits [labels]
        feeds = {name: torch.from_numpy(value).to(loaded.device) for name, value in inputs.items()}
        return model(**feeds).logits[0].float().cpu().numpy()

    logits = loaded.own_output("logits", inputs, compute)  # remembered where the model may not be built
    return activate(torch.from_numpy(logits), spec.activation).double().numpy()


def _takes(model: torch.nn.Module, name: str) -> bool:
    import inspect

    return name in inspect.signature(model.forward).parameters


@torch.inference_mode()
def _references(scorer, sequences: list[list[int]]) -> list[tuple[np.ndarray, np.ndarray]]:
    """The model's own scores [labels] and last hidden state [H] for each sequence, one forward
    each, under transformers' eager attention."""
    model = scorer.loaded.model
    set_implementation(model, "eager")
    try:
        with all_paused(scorer.family.speedups):  # its own layers and norms, not compiled or fused ones
            return [_reference(scorer, ids) for ids in sequences]
    finally:
        set_implementation(model, ATTN_NAME)


def _reference(scorer, ids: list[int]) -> tuple[np.ndarray, np.ndarray]:
    model, spec = scorer.loaded.model, scorer.spec
    # a causal LM's own head over the last position only (the one read), when its forward allows
    label_tokens = spec.label_ids is not None  # a causal LM's label tokens, read from its LM head
    keep = {"logits_to_keep": 1} if label_tokens and _takes(model, "logits_to_keep") else {}
    out = model(
        input_ids=torch.tensor([ids], device=scorer.loaded.device), use_cache=False, output_hidden_states=True, **keep
    )
    hidden = out.hidden_states[-1][0, -1].double().cpu().numpy()
    if not label_tokens:
        return activate(out.logits[0], spec.activation).double().cpu().numpy(), hidden
    logits = out.logits[0, -1].float()  # [vocab]
    labels = torch.tensor(spec.label_ids, device=logits.device)
    if spec.logit_score:  # the folder's LogitScore on the model's own logits
        return activate(logit_score(logits[labels]), spec.activation).double().cpu().numpy(), hidden
    if spec.activation == "none":
        return torch.exp(torch.log_softmax(logits, dim=-1))[labels].double().cpu().numpy(), hidden
    return activate(logits[labels], spec.activation).double().cpu().numpy(), hidden
