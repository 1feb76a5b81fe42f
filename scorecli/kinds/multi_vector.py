"""Late-interaction scoring (`multi-vector`, docs/models.md: Which models): a sentence-transformers 6
`MultiVectorEncoder` folder, or a Stanford `HF_ColBERT` checkpoint as sentence-transformers reads
it. The query (its prompt, cut or expanded to its length) and each item (its prompt, cut at the
document length) become token vectors (the encoder's last hidden states through the folder's
projection, L2-normalized); an item's score is MaxSim: for every query token that counts its best
similarity with an item token that counts (skip-list words, padding and a document allow-list as
the folder's MultiVectorMask says), summed (MeanMaxSim: averaged), on the device.

Pooling: every token (`tokens`); head: `maxsim` (`heads.maxsim`). Detection, the folder's
modules, spec rules, inspect lines and the self-check probe live here; what kinds that encode
the query and items apart share is `kinds.apart`. Knows nothing about windows or output.
"""

from __future__ import annotations

import json
import os

import numpy as np
import torch
import torch.nn.functional as F

from scorecli.attention.backends import capabilities
from scorecli.checks.selfcheck import relative_error
from scorecli.core.batching import Batch
from scorecli.core.pack import Seq
from scorecli.errors import UsageError
from scorecli.kinds import KINDS, POOLINGS, Checkpoint, Setup
from scorecli.kinds.apart import (
    ApartFamily,
    PaddedForward,
)
from scorecli.kinds.apart_spec import check_encoder, lengths, prompts_line, refuse_flags, text_encoder
from scorecli.kinds.heads import maxsim
from scorecli.kinds.spec import RunSpec, one_label
from scorecli.model.vector_folders import MultiVectorFolder, read_multi_vector
from scorecli.runtimes.fast_encoder import supports

SIMILARITIES = ("maxsim", "meanmaxsim")


def _stanford(path: str) -> bool:
    try:
        with open(os.path.join(path, "config.json"), encoding="utf-8") as f:
            return "HF_ColBERT" in (json.load(f).get("architectures") or [])
    except (OSError, ValueError):
        return False


def _cuts(folder: MultiVectorFolder, query: int) -> int:
    """The query's cut: its expansion length when fixed, at least that otherwise."""
    x = folder.expansion
    return query if x is None else (x.length if x.fixed else max(query, x.length))


def _mask_line(folder: MultiVectorFolder, tokenizer) -> str:
    """`inspect`'s "mask:" line: the skip-list words that are one token each (`skip_ids`: the
    only ones dropped, as in sentence-transformers) and the ids documents keep."""
    applied, listed = len(folder.skip_ids(tokenizer)), len(folder.skiplist)
    line = f"mask:           {applied} skip-list tokens on {', '.join(folder.skiplist_tasks)}"
    if applied < listed:
        line += f" ({listed - applied} more listed words are no single token: they drop nothing)"
    return line + (f"; documents keep {len(folder.keep_only)} token ids only" if folder.keep_only else "")


class MultiVectorFamily(ApartFamily):
    """How a multi-vector model scores rows (see `scorecli.kinds.Family`)."""

    @classmethod
    def detects(cls, kind: str, checkpoint: Checkpoint) -> bool:
        return checkpoint.folder_type in ("MultiVectorEncoder", "ColBERT") or "HF_ColBERT" in checkpoint.architectures

    @classmethod
    def read_folder(cls, kind: str, path: str) -> MultiVectorFolder:
        return read_multi_vector(path, stanford=_stanford(path))

    @classmethod
    def resolve(cls, kind: str, cfg, loaded, template, support) -> RunSpec:
        refuse_flags(kind, cfg, template)
        check_encoder(kind, loaded)
        if cfg.similarity is not None:
            raise UsageError(f"--similarity: a {kind} model scores by MaxSim, as its folder says")
        folder = loaded.sentence
        _, item = lengths(cfg, loaded, folder)
        similarity = folder.similarity if folder.similarity in SIMILARITIES else "maxsim"
        return RunSpec(kind=kind, pooling="tokens", max_seq_len=item, similarity=similarity, **one_label(cfg))

    @classmethod
    def inspect_lines(cls, kind: str, checkpoint: Checkpoint, skeleton, tokenizer) -> tuple[list[str], int | None, str]:
        folder = cls.read_folder(kind, checkpoint.path)
        folder = folder.resolved(folder.transformer_dir, checkpoint.config)
        query, item = folder.lengths()
        x = folder.expansion
        expansion = (
            "none"
            if x is None
            else f"{'exactly' if x.fixed else 'at least'} {x.length} tokens, padded with "
            f"{x.token or 'the mask token'} ({'attended' if x.attend else 'not attended'})"
        )
        dims = " -> ".join(str(d.weight.shape[0]) for d in folder.dense) or "none"
        lines = [
            "labels:         1 (similarity)",
            prompts_line(folder),
            f"query:          cut at {_cuts(folder, query)} tokens; expansion {expansion}",
            f"items:          cut at {item} tokens",
            f"token vectors:  projection {dims}{', L2-normalized' if folder.normalize else ''}",
            _mask_line(folder, tokenizer),
            f"similarity:     {folder.similarity if folder.similarity in SIMILARITIES else 'maxsim'}",
        ]
        return lines, item, "no (query and items are encoded as their own sequences)"

    @classmethod
    def scores_line(cls, kind: str, checkpoint: Checkpoint) -> str:
        """MaxSim, or the folder's MeanMaxSim (the best item token per query token, averaged)."""
        if cls.read_folder(kind, checkpoint.path).similarity != "meanmaxsim":
            return super().scores_line(kind, checkpoint)
        return f"{POOLINGS[KINDS[kind].pooling]}, then MeanMaxSim: per query token the best item token, averaged"

    def __init__(self, setup: Setup):
        super().__init__(setup)
        cfg, loaded = setup.config, setup.loaded
        self.folder: MultiVectorFolder = loaded.sentence
        query, item = lengths(cfg, loaded, self.folder)
        expansion = self.folder.expansion
        owns = () if expansion is None else (("the model's query expansion length", expansion.length),)
        self.encoder = text_encoder(setup, self.folder, _cuts(self.folder, query), item, owns)
        fast = capabilities(cfg.attention).fused_encoder and supports(loaded.model)
        self.forward = PaddedForward(loaded.model, loaded.device, "last_hidden_state", fast)
        self.backend_name = "sdpa (fused encoder)" if fast else "model"
        tok, device = loaded.tokenizer, loaded.device
        self.skip = torch.tensor(self.folder.skip_ids(tok), dtype=torch.long, device=device)
        keep = self.folder.keep_only
        self.keep = None if keep is None else torch.tensor(keep, dtype=torch.long, device=device)
        self.expand_id = self._expansion_id(tok)
        self.mean = setup.spec.similarity == "meanmaxsim"
        self.use_streams()

    def _expansion_id(self, tok) -> int:
        x = self.folder.expansion
        if x is not None and x.token is not None:
            return int(tok.convert_tokens_to_ids(x.token))
        for found in (tok.mask_token_id, tok.eos_token_id, tok.pad_token_id):
            if found is not None:
                return int(found)
        return 0

    def query_seq(self, ids: np.ndarray) -> Seq:
        """The query, padded with expansion tokens up to the expansion length: scored, and attended
        to only when the folder says so."""
        x = self.folder.expansion
        if x is None or len(ids) >= x.length:
            return super().query_seq(ids)
        full = np.concatenate([ids, np.full(x.length - len(ids), self.expand_id, dtype=np.int64)])
        seq = super().query_seq(full)
        attended = len(full) if x.attend else len(ids)
        return Seq(seq.input_ids, seq.position_ids, attended, np.array([len(full) - attended]), seq.item_index)

    def vectors(self, batch: Batch, task: str, forward: PaddedForward) -> tuple[torch.Tensor, torch.Tensor]:
        """([S, L, D] float32 token vectors, [S, L] bool: which count) of a batch's texts."""
        states, ids, present = forward(batch)
        vectors = states.float()
        for dense in self.folder.dense:
            vectors = dense(vectors)
        if self.folder.normalize:
            vectors = F.normalize(vectors, p=2, dim=-1)
        counts = present
        if task in self.folder.skiplist_tasks and len(self.skip):
            counts = counts & ~torch.isin(ids, self.skip)
        if task != "query" and self.keep is not None:
            counts = counts & torch.isin(ids, self.keep)
        return vectors, counts

    def query_reps(self, batch: Batch, forward: PaddedForward) -> tuple[torch.Tensor, ...]:
        return self.vectors(batch, "query", forward)

    def item_scores(self, batch: Batch, reps: tuple[torch.Tensor, ...], forward: PaddedForward) -> torch.Tensor:
        vectors, counts = self.vectors(batch, "document", forward)
        return maxsim(reps[0], reps[1], vectors, counts, self.mean)

    def probe_errors(self, scorer) -> dict[str, float]:
        """Relative difference of the probe's scores (the run's own batches, one window) from each
        text alone through the model's own forward, compared token by token."""
        ours, enc = self.probe_row(scorer)
        query = self._reference(self.query_seq(enc.query), "query")
        theirs = np.array(
            [
                _maxsim_one(query, self._reference(ApartFamily.query_seq(self, x), "document"), self.mean)
                for x in enc.items
            ]
        )
        return {"scores": relative_error(ours, theirs)}

    def reference_score(self, query: Seq, item: Seq) -> float:
        return _maxsim_one(self._reference(query, "query"), self._reference(item, "document"), self.mean)

    @torch.inference_mode()
    def _reference(self, seq: Seq, task: str) -> tuple[np.ndarray, np.ndarray]:
        """(token vectors [L, D], [L] bool: which count) of one text alone, through the model's own
        forward (not the fused encoder)."""
        device = self.loaded.device
        ids = torch.as_tensor(seq.input_ids, device=device)[None]
        mask = (torch.arange(len(seq.input_ids), device=device) < seq.prefix_len).long()[None]
        vectors = self.loaded.model(input_ids=ids, attention_mask=mask).last_hidden_state[0].float()
        for dense in self.folder.dense:
            vectors = dense(vectors)
        if self.folder.normalize:
            vectors = vectors / vectors.norm(dim=-1, keepdim=True).clamp(min=1e-12)
        words = set(self.skip.tolist()) if task in self.folder.skiplist_tasks else set()
        keep = None if self.keep is None or task == "query" else set(self.keep.tolist())
        counts = [t not in words and (keep is None or t in keep) for t in seq.input_ids.tolist()]
        return vectors.double().cpu().numpy(), np.array(counts, dtype=bool)


def _maxsim_one(query: tuple[np.ndarray, np.ndarray], item: tuple[np.ndarray, np.ndarray], mean: bool) -> float:
    """MaxSim of one query and one item, written out: each counted query token's best counted item token."""
    (q, q_counts), (d, d_counts) = query, item
    if not d_counts.any():
        return -1e9 / (max(int(q_counts.sum()), 1) if mean else 1)
    best = [max(float(q[i] @ d[j]) for j in np.flatnonzero(d_counts)) for i in np.flatnonzero(q_counts)]
    return sum(best) / (max(len(best), 1) if mean else 1)
