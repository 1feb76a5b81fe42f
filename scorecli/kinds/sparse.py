"""Sparse lexical scoring (`sparse`, docs/models.md: Which models): a sentence-transformers 6
`SparseEncoder` folder. An item's vector is SPLADE pooling of its MLM logits (per vocabulary entry,
the max, or sum, over its tokens of log(1 + relu(logit))); the query's is the same, or, behind a
`Router` with an inference-free query side, a `SparseStaticEmbedding` (a weight per token the
query holds). The score is their dot product (or cosine), as `SparseEncoder.similarity` gives.

Pooling: `splade` (`kinds.pooling`); head: `sparse-dot` (`heads.sparse_dot`). An item needs its
logits only at the vocabulary entries its query holds: with a dot product and no
`max_active_dims`, the MLM head's vocabulary projection runs for those entries alone (the rows of
its weight the query names), not for the whole vocabulary. Detection, the folder's modules, spec
rules, inspect lines and the self-check probe live here; what kinds that encode the query and
items apart share is `kinds.apart`. Knows nothing about windows or output.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from scorecli.attention.backends import capabilities
from scorecli.checks.selfcheck import relative_error
from scorecli.core.batching import Batch
from scorecli.core.pack import Seq
from scorecli.errors import UsageError
from scorecli.kinds import Checkpoint, Setup
from scorecli.kinds.apart import (
    ApartFamily,
    PaddedForward,
    with_module,
)
from scorecli.kinds.apart_spec import check_encoder, lengths, prompts_line, refuse_flags, text_encoder
from scorecli.kinds.heads import sparse_dot
from scorecli.kinds.pooling import splade, top_dims
from scorecli.kinds.spec import RunSpec, one_label
from scorecli.model.st_files import json_file
from scorecli.model.vector_folders import SparseFolder, read_sparse, static_weights
from scorecli.runtimes.fast_encoder import supports

SIMILARITIES = ("dot", "cosine")


def _static_cut(folder: SparseFolder) -> int | None:
    """The static query side's cut: its own tokenizer's `model_max_length` (None: no static side)."""
    if folder.static_query is None:
        return None
    config = json_file(f"{folder.static_query}/tokenizer_config.json", folder.static_query, missing_ok=True)
    return int(config.get("model_max_length") or 512)  # type: ignore[union-attr]


class SparseFamily(ApartFamily):
    """How a sparse model scores rows (see `scorecli.kinds.Family`)."""

    @classmethod
    def detects(cls, kind: str, checkpoint: Checkpoint) -> bool:
        return checkpoint.folder_type == "SparseEncoder"

    @classmethod
    def read_folder(cls, kind: str, path: str) -> SparseFolder:
        return read_sparse(path)

    @classmethod
    def resolve(cls, kind: str, cfg, loaded, template, support) -> RunSpec:
        refuse_flags(kind, cfg, template)
        check_encoder(kind, loaded)
        folder = loaded.sentence
        similarity = cfg.similarity or folder.similarity or "dot"
        if similarity not in SIMILARITIES:
            raise UsageError(
                f"the model's similarity is {similarity!r}; scorecli computes dot or cosine: pass --similarity"
            )
        _, item = lengths(cfg, loaded, folder)
        return RunSpec(kind=kind, pooling="splade", max_seq_len=item, similarity=similarity, **one_label(cfg))

    @classmethod
    def inspect_lines(cls, kind: str, checkpoint: Checkpoint, skeleton, tokenizer) -> tuple[list[str], int | None, str]:
        folder = cls.read_folder(kind, checkpoint.path)
        folder = folder.resolved(folder.transformer_dir, checkpoint.config)
        query, item = folder.lengths()
        side = (
            f"inference-free: a SparseStaticEmbedding (a weight per token), cut at {_static_cut(folder)} tokens"
            if folder.static_query
            else f"the MLM and SPLADE pooling, cut at {query} tokens"
        )
        lines = [
            "labels:         1 (similarity)",
            prompts_line(folder),
            f"query side:     {side}",
            f"items:          SPLADE pooling ({folder.pooling}, {folder.activation}) of the MLM logits, cut at "
            f"{item} tokens" + (f"; {folder.max_active_dims} active dimensions" if folder.max_active_dims else ""),
            f"similarity:     {folder.similarity or 'dot'}",
        ]
        return lines, item, "no (query and items are encoded as their own sequences)"

    @classmethod
    def scores_line(cls, kind: str, checkpoint: Checkpoint) -> str:
        """The folder's SpladePooling (max or sum; `log1p_relu`: log(1 + x) once more) and
        similarity (dot unless it says cosine)."""
        folder = cls.read_folder(kind, checkpoint.path)
        weights = "log(1 + relu(MLM logits))"
        if folder.activation == "log1p_relu":
            weights = f"log(1 + {weights})"
        similarity = "cosine" if folder.similarity == "cosine" else "dot product"
        return f"{folder.pooling} over tokens of {weights}, then {similarity} of sparse vocabulary vectors"

    def __init__(self, setup: Setup):
        super().__init__(setup)
        cfg, loaded = setup.config, setup.loaded
        self.folder: SparseFolder = loaded.sentence
        query, item = lengths(cfg, loaded, self.folder)
        static = _static_cut(self.folder)
        model = loaded.model
        owns = (("the inference-free query side's model_max_length", static),)
        self.encoder = text_encoder(setup, self.folder, static or query, item, owns, query_specials=static is None)
        decoder = model.get_output_embeddings()
        name = next(n for n, m in model.named_modules() if m is decoder)
        self.weight = decoder.weight.detach()  # [V, H]
        self.bias = None if decoder.bias is None else decoder.bias.detach()  # [V]
        fast = capabilities(cfg.attention).fused_encoder and supports(model.base_model)
        # the model's own head up to its vocabulary projection (which runs here, where it is needed)
        self.forward = PaddedForward(with_module(model, name, torch.nn.Identity()), loaded.device, "logits", fast)
        self.backend_name = "sdpa (fused encoder)" if fast else "model"
        self.static = None
        if self.folder.static_query is not None:
            self.static = static_weights(self.folder.static_query).to(loaded.device)
        # an item's logits at its query's entries suffice for a dot product of uncut vectors
        self.whole = setup.spec.similarity != "dot" or self.folder.max_active_dims is not None
        self.use_streams()

    def query_vectors(self, batch: Batch, forward: PaddedForward) -> torch.Tensor:
        """[S, V] float32 query vectors: the static weights of the tokens each query holds, or SPLADE
        pooling of its MLM logits; cut to `max_active_dims`."""
        if self.static is not None:
            ids, present, _ = forward.inputs(batch)
            vocab = self.static.shape[0]
            where = torch.where(present, ids, vocab)  # padding lands in a column dropped below
            out = torch.zeros(ids.shape[0], vocab + 1, device=ids.device)
            out.scatter_(1, where, F.pad(self.static, (0, 1))[where])
            vectors = out[:, :vocab]
        else:
            states, _, present = forward(batch)
            vectors = self._pool(F.linear(states.float(), self.weight.float(), _float(self.bias)), present)
        return top_dims(vectors, self.folder.max_active_dims)

    def _pool(self, logits: torch.Tensor, present: torch.Tensor) -> torch.Tensor:
        return splade(logits, present, self.folder.pooling, self.folder.activation)

    def query_reps(self, batch: Batch, forward: PaddedForward) -> tuple[torch.Tensor, ...]:
        """(entries [S, K], values [S, K], L2 norm [S, 1]) of each query's non-zero entries."""
        vectors = self.query_vectors(batch, forward)
        k = int((vectors != 0).sum(dim=-1).max()) if vectors.numel() else 0  # one read per query batch
        index = torch.topk(vectors.abs(), k=k, dim=-1).indices
        return index, vectors.gather(1, index), vectors.norm(dim=-1, keepdim=True)

    def item_scores(self, batch: Batch, reps: tuple[torch.Tensor, ...], forward: PaddedForward) -> torch.Tensor:
        index, values, query_norm = reps
        states, _, present = forward(batch)
        states = states.float()
        if not self.whole:  # the vocabulary projection at the entries the batch's queries hold only
            cols = torch.unique(index)  # [U] sorted
            logits = F.linear(states, self.weight[cols].float(), None if self.bias is None else self.bias[cols].float())
            pooled = self._pool(logits, present)  # [S, U]
            return sparse_dot(pooled.gather(1, torch.searchsorted(cols, index)), values)
        item = top_dims(
            self._pool(F.linear(states, self.weight.float(), _float(self.bias)), present), self.folder.max_active_dims
        )
        norms = (item.norm(dim=-1), query_norm[:, 0]) if self.spec.similarity == "cosine" else None
        return sparse_dot(item.gather(1, index), values, norms)

    def probe_errors(self, scorer) -> dict[str, float]:
        """Relative difference of the probe's scores (the run's own batches, one window) from each
        text alone through the model's own full forward (its head over the whole vocabulary)."""
        ours, enc = self.probe_row(scorer)
        query = self._reference(enc.query, self.static is None)
        theirs = [self._compare(query, self._reference(x, True)) for x in enc.items]
        return {"scores": relative_error(ours, np.array(theirs))}

    def reference_score(self, query: Seq, item: Seq) -> float:
        return self._compare(
            self._reference(query.input_ids, self.static is None), self._reference(item.input_ids, True)
        )

    @torch.inference_mode()
    def _reference(self, ids: np.ndarray, model: bool) -> np.ndarray:
        """[V] float64 vector of one text alone: the model's own forward and head (`model`), or the
        static weights of the tokens it holds."""
        top = self.folder.max_active_dims
        if not model:
            vector = np.zeros(self.static.shape[0])  # type: ignore[union-attr]
            vector[np.unique(ids)] = self.static.cpu().double().numpy()[np.unique(ids)]  # type: ignore[union-attr]
            return top_dims(torch.from_numpy(vector)[None], top)[0].numpy()
        x = torch.as_tensor(ids, device=self.loaded.device)[None]
        logits = self.loaded.model(input_ids=x, attention_mask=torch.ones_like(x)).logits[0].double()
        vector = torch.log1p(torch.relu(logits))
        if self.folder.activation == "log1p_relu":
            vector = torch.log1p(vector)
        vector = vector.max(dim=0).values if self.folder.pooling == "max" else vector.sum(dim=0)
        return top_dims(vector[None], top)[0].cpu().numpy()

    def _compare(self, query: np.ndarray, item: np.ndarray) -> float:
        dot = float(query @ item)
        if self.spec.similarity == "cosine":
            dot /= max(float(np.linalg.norm(query)), 1e-12) * max(float(np.linalg.norm(item)), 1e-12)
        return dot


def _float(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else t.float()
