"""The torch runtime: run a batch through the model and gather hidden states at the pooled positions.

Decoders run their base model (no lm_head, no classifier) with the attention backend's
masks and explicit position ids (`DecoderForward`); cross-encoders run their own full
forward on padded pairs (`EncoderForward`; `onnx.OnnxForward` is its ONNX Runtime twin, with
the same `Pooled` results); embedding models' forward is their kind's (`kinds.embedding`), and
speed-ups wrap these (`compiled`, `fused_norms`, `fast_encoder`). The kinds choose and build
these forwards. Knows nothing about tokenization, kinds, activations or output.
"""

from __future__ import annotations

import contextlib
import copy
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch

from scorecli.attention import AttentionBackend, bound, pad_ragged, to_device
from scorecli.attention.shared import Recorder, SharedKV, records_layers
from scorecli.core.batching import Batch
from scorecli.runtimes.fast_encoder import FastEncoder


@dataclass(frozen=True, slots=True)
class Pooled:
    """Per-item results of one batch, in `batch.item_index` order."""

    score_states: torch.Tensor | None  # [N, H] hidden states the head reads (decoders)
    logits: torch.Tensor | None  # [N, C] the model's own logits (cross-encoders)
    hidden: torch.Tensor | None  # [N, H] pooled hidden states, when asked


# Decoder layers whose forward is exactly: x + attn(norm1(x)), then h + mlp(norm2(h)), row-wise
# apart from attention. Their last layer only needs the rows that are read (`RowsLastLayer`).
ROWWISE_LAYERS = {"LlamaDecoderLayer", "MistralDecoderLayer", "Qwen2DecoderLayer", "Qwen3DecoderLayer"}


@contextmanager
def swapped(owner: torch.nn.Module, name: str, module: torch.nn.Module):
    """Run with `owner.<name>` replaced by `module`, then put the original back."""
    own = getattr(owner, name)
    setattr(owner, name, module)
    try:
        yield module
    finally:
        setattr(owner, name, own)


def with_encoder(model: torch.nn.Module, encoder: torch.nn.Module) -> torch.nn.Module:
    """A shallow copy of `model` whose base model's `encoder` is `encoder` (weights shared)."""
    base = copy.copy(model.base_model)
    base._modules = {**base._modules, "encoder": encoder}
    if model.base_model is model:  # a base model (an embedding model's transformer)
        return base
    view = copy.copy(model)
    view._modules = {**view._modules, model.base_model_prefix: base}
    return view


class RowsLastLayer(torch.nn.Module):
    """A decoder's last layer computed only at `rows` (flat indices into [B * L]) after attention.

    Attention still runs over every token (keys and values need them); the residual, the
    post-attention norm and the MLP, most of a layer's work, run on the rows read. Output
    [1, R, H]; the model's final norm is row-wise, so `last_hidden_state[0]` holds the rows.
    """

    def __init__(self, layer: torch.nn.Module):
        super().__init__()
        self.layer = layer
        self.rows: torch.Tensor | None = None

    def __getattr__(self, name: str):
        """The model's layer loop may read the layer's own attributes (transformers 5.0 reads
        `attention_type`): they come from the wrapped layer."""
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._modules["layer"], name)

    def forward(self, hidden_states: torch.Tensor, **kwargs) -> torch.Tensor:
        layer = self.layer
        attn, _ = layer.self_attn(hidden_states=layer.input_layernorm(hidden_states), **kwargs)
        rows = self.rows
        h = hidden_states.flatten(0, 1).index_select(0, rows) + attn.flatten(0, 1).index_select(0, rows)  # [R, H]
        h = h + layer.mlp(layer.post_attention_layernorm(h))
        return h[None]


class DecoderForward:
    """Base model of a decoder under a scorecli attention backend, with the model's fork
    (`scorecli.forks.Fork`: recurrent layers run from their prefix's state, attention that the
    model computes itself given MIS masks and positions) swapped in for each batch."""

    def __init__(
        self, model: torch.nn.Module, backend: AttentionBackend, device: torch.device, dtype: torch.dtype, fork=None
    ):
        self.base = getattr(model, model.base_model_prefix)
        self.fork = fork
        self.backend = backend
        self.device = device
        self.dtype = dtype
        layers = getattr(self.base, "layers", None)
        self.last = None
        if isinstance(layers, torch.nn.ModuleList) and type(layers[-1]).__name__ in ROWWISE_LAYERS:
            self.last = RowsLastLayer(layers[-1])
        self.shares_prefix = (
            backend.shares_prefix and isinstance(layers, torch.nn.ModuleList) and records_layers(layers)
        )

    @torch.inference_mode()
    def share(self, ids: np.ndarray) -> None:
        """Make the next batches continue the shared prefix `ids` ([C] int64; empty: none).

        Runs the model once over `ids` and keeps every layer's keys and values in the backend
        (nothing to do when it holds these ids already)."""
        held = self.backend.shared
        if len(ids) == 0 or not self.shares_prefix:
            if len(ids):
                raise RuntimeError(f"{self.backend.name}: this model and backend cannot share a prefix")
            self.backend.shared = None
            return
        if held is not None and np.array_equal(held.ids, ids):
            return
        self.backend.shared = None
        recorder = Recorder()
        (t,) = to_device([ids.astype(np.int64)], self.device)
        with bound(recorder):
            self.base(input_ids=t[None], position_ids=torch.arange(len(ids), device=self.device)[None], use_cache=False)
        self.backend.shared = SharedKV(ids.copy(), recorder.keys, recorder.values)

    @torch.inference_mode()
    def __call__(self, batch: Batch, pooling: str | None) -> Pooled:
        inputs = self.backend.plan(batch, self.device, self.dtype)
        kwargs = {"input_ids": inputs.input_ids, "position_ids": inputs.position_ids, "use_cache": False}
        forked = (
            self.fork.running(batch, self.backend.is_padded, self.device) if self.fork else contextlib.nullcontext()
        )
        with bound(self.backend), forked:
            return self._pooled(inputs, kwargs, pooling)

    def _pooled(self, inputs, kwargs: dict, pooling: str | None) -> Pooled:
        if self.last is None:
            hidden = self.base(**kwargs).last_hidden_state.flatten(0, 1)  # [B * L, H]
            states = hidden[inputs.pool_index]  # [N, H]
            first = None if pooling != "cls" else hidden[inputs.first_index]
        else:
            n = len(inputs.pool_index)
            rows = inputs.pool_index if pooling != "cls" else torch.cat([inputs.pool_index, inputs.first_index])
            self.last.rows = rows
            with swapped(self.base.layers, str(len(self.base.layers) - 1), self.last):
                hidden = self.base(**kwargs).last_hidden_state[0]  # [R, H]
            states, first = hidden[:n], (hidden[n:] if pooling == "cls" else None)
        pooled = None if pooling is None else (states if pooling == "last" else first)
        return Pooled(states, None, pooled)


class EncoderForward:
    """A cross-encoder's own forward over padded (query, item) pairs, one item per sequence.

    With `fast=True` (BERT-family models, `fast_encoder.supports`), it runs a view of the
    model whose encoder module is a `FastEncoder` (fused QKV, and a last layer that computes
    only the rows the head and the pooled states read); the loaded model is not modified.
    Calls on one instance run one at a time; `twin()` gives another over the same weights
    for a concurrent stream.
    """

    def __init__(self, model: torch.nn.Module, device: torch.device, fast: bool = False, fused: list | None = None):
        self.source, self.model, self.device = model, model, device
        self.fast = None
        if fast:
            self.fast = FastEncoder(model, fused)
            self.model = with_encoder(model, self.fast)

    def twin(self) -> EncoderForward:
        """Another forward over the same weights (fused ones included) with its own state."""
        fast = self.fast is not None
        return EncoderForward(self.source, self.device, fast, self.fast.fused if fast else None)

    @torch.inference_mode()
    def __call__(self, batch: Batch, pooling: str | None) -> Pooled:
        s, length = batch.num_seqs, batch.max_len
        where = batch.padded_index()  # [T]
        types = batch.token_type_ids if batch.token_type_ids is not None else np.zeros_like(batch.input_ids)
        ids, tt, where_t, last = to_device([batch.input_ids, types, where, where[batch.pool_index]], self.device)
        kwargs = {}
        if batch.token_type_ids is not None:
            kwargs["token_type_ids"] = pad_ragged(tt, where_t, s, length, 0)  # [S, L]
        kwargs["input_ids"] = pad_ragged(ids, where_t, s, length, 0)  # [S, L]
        kwargs["attention_mask"] = pad_ragged(torch.ones_like(ids), where_t, s, length, 0)  # [S, L]
        if self.fast is not None:
            self.fast.cls_only = pooling in (None, "cls")
            logits = self.model(**kwargs).logits
            hidden = self.fast.last_hidden  # [S, 1, H] with cls_only, else [S, L, H]
        else:
            out = self.model(output_hidden_states=pooling is not None, **kwargs)
            logits, hidden = out.logits, (out.hidden_states[-1] if pooling is not None else None)
        pooled = None
        if pooling == "cls":
            pooled = hidden[:, 0]
        elif pooling == "last":
            pooled = hidden.flatten(0, 1)[last]
        return Pooled(None, logits, pooled)
