"""Read a sentence-transformers model folder (`modules.json`) and apply its modules after the
transformer: Pooling, Dense and Normalize, exactly as sentence-transformers does.

Everything is read from the folder's own files (`modules.json`, `sentence_bert_config.json`,
`config_sentence_transformers.json`, each module's `config.json` and safetensors weights);
sentence-transformers itself is never imported. A module scorecli does not reproduce is refused
with one line. A transformer that reads text as chat messages (sentence-transformers 6.2's
"message" input mode) says so in `SentenceModules.message` (`messages` renders the text).
Pooling works on ragged token states (one run of tokens per text, the first `skip` of which, a
prompt excluded by `include_prompt: false`, are not pooled). This module knows nothing about
rows, batches' layout on the device, or output.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from scorecli.errors import UsageError
from scorecli.model.messages import MessageMode, read_mode
from scorecli.model.st_files import (
    MODULES_FILE,
    changed_kwargs,
    check_load_kwargs,
    check_no_processor,
    is_sentence_folder,
    json_file,
    json_if,
    transformer_config,
)

POOLING_MODES = ("cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean", "lasttoken")
# the legacy boolean keys of a Pooling config, in the order sentence-transformers reads them
_LEGACY_POOLING = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}
# a Dense module's activation (its config names a torch class): what scorecli applies
_ACTIVATIONS = {
    "torch.nn.modules.activation.Tanh": torch.tanh,
    "torch.nn.modules.linear.Identity": lambda x: x,
    "torch.nn.modules.activation.Sigmoid": torch.sigmoid,
    "torch.nn.modules.activation.ReLU": torch.relu,
    "torch.nn.modules.activation.GELU": F.gelu,
}
SIMILARITIES = ("cosine", "dot")


def sentence_folder_type(path: str) -> str | None:
    """The `model_type` a sentence-transformers folder's config names ("SentenceTransformer" when
    it names none); None for any other folder."""
    if not is_sentence_folder(path):
        return None
    st = os.path.join(path, "config_sentence_transformers.json")
    try:
        named = json_if(st).get("model_type") if os.path.isfile(st) else None
    except (UsageError, AttributeError):
        named = None
    return str(named) if named else "SentenceTransformer"


@dataclass(frozen=True)
class Dense:
    """A Dense module: activation(x @ W.T + b), plus a residual (x, or x through a bias-free
    linear layer when the sizes differ) when `use_residual`."""

    weight: torch.Tensor  # [out, in] float32
    bias: torch.Tensor | None  # [out]
    activation: str
    residual: torch.Tensor | None = None  # [out, in] when use_residual and in != out
    use_residual: bool = False

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        out = _ACTIVATIONS[self.activation](F.linear(x, self.weight, self.bias))
        if self.use_residual:
            out = out + (x if self.residual is None else F.linear(x, self.residual))
        return out

    def to(self, device: torch.device) -> Dense:
        move = lambda t: None if t is None else t.to(device)
        return Dense(move(self.weight), move(self.bias), self.activation, move(self.residual), self.use_residual)


@dataclass(frozen=True)
class SentenceModules:
    """What follows the transformer in a sentence-transformers folder, and how it reads text."""

    transformer_dir: str  # the folder holding the transformer's weights and tokenizer
    pooling: tuple[str, ...]  # pooling modes, concatenated in this order
    include_prompt: bool
    steps: tuple[Dense | str, ...]  # after pooling, in order: Dense modules and "normalize"
    prompts: dict[str, str] = field(default_factory=dict)
    default_prompt: str | None = None  # the prompt `encode` uses when none is named
    similarity: str | None = None  # the model's `similarity_fn_name`
    max_seq_length: int | None = None  # from sentence_bert_config.json (else the tokenizer's)
    do_lower_case: bool = False
    message: MessageMode | None = None  # text rendered as chat messages (`messages`), or plain text
    truncate_dim: int | None = None  # the folder's `truncate_dim`: `encode` keeps the first this many dimensions

    @property
    def normalized(self) -> bool:
        return "normalize" in self.steps

    def dimension(self, hidden_size: int) -> int:
        dense = [s for s in self.steps if isinstance(s, Dense)]
        full = dense[-1].weight.shape[0] if dense else hidden_size * len(self.pooling)
        return full if self.truncate_dim is None else min(full, self.truncate_dim)

    def adapt_tokenizer(self, tokenizer) -> None:
        """Make `tokenizer` read text as the folder says (`do_lower_case`)."""
        if self.do_lower_case:
            apply_lower_case(tokenizer)

    def to(self, device: torch.device) -> SentenceModules:
        return dataclasses.replace(self, steps=tuple(s.to(device) if isinstance(s, Dense) else s for s in self.steps))

    def resolved(self, folder: str, hf_config) -> SentenceModules:
        """With `max_seq_length` as sentence-transformers settles it (`settled_max_length`)."""
        if self.max_seq_length is not None:
            return self
        return dataclasses.replace(self, max_seq_length=settled_max_length(folder, hf_config))

    def after_pooling(self, pooled: torch.Tensor) -> torch.Tensor:
        """[N, pooled dim] float32 -> [N, embedding dim]: the Dense and Normalize modules, then the
        folder's `truncate_dim` (after Normalize, as `encode` cuts: not normalized again)."""
        for step in self.steps:
            pooled = F.normalize(pooled, p=2, dim=-1) if step == "normalize" else step(pooled)
        return pooled if self.truncate_dim is None else pooled[..., : self.truncate_dim]


def settled_max_length(folder: str, hf_config) -> int | None:
    """The maximum length sentence-transformers gives a transformer whose config names none: the
    tokenizer's `model_max_length` capped at the model's `max_position_embeddings`."""
    limit = json_if(os.path.join(folder, "tokenizer_config.json")).get("model_max_length")
    positions = getattr(hf_config, "max_position_embeddings", None)
    if positions is not None and positions != -1:
        limit = positions if limit is None else min(int(limit), positions)
    return None if limit is None else int(limit)


def transformer_folder(path: str) -> str:
    """The folder of a sentence-transformers model's transformer (its first module; behind a
    `Router`, the first module of the route documents take)."""
    entries = sorted(json_file(os.path.join(path, MODULES_FILE), path), key=lambda e: e.get("idx", 0))
    first = os.path.join(path, (entries[0].get("path") if entries else "") or "")
    if not entries or str(entries[0].get("type", "")).rsplit(".", 1)[-1] != "Router":
        return first
    routes = router_routes(first)
    return os.path.join(first, routes.get("document", [""])[0])


def router_routes(where: str) -> dict[str, list[str]]:
    """A `Router` module's routes: {"query": [subfolder, ...], "document": [...]} (`router_config.json`;
    the default route stands for a task it does not name)."""
    config = json_file(os.path.join(where, "router_config.json"), where)
    structure = dict(config.get("structure") or {})
    default = (config.get("parameters") or {}).get("default_route")
    for task in ("query", "document"):
        if task not in structure and default in structure:
            structure[task] = structure[default]
    return {str(k): list(v) for k, v in structure.items()}


def apply_lower_case(tokenizer) -> None:
    """Make the tokenizer lowercase its input, as sentence-transformers does for `do_lower_case`:
    a Lowercase normalizer in front of the fast tokenizer's own (unless it has one)."""
    from tokenizers.normalizers import Lowercase, Sequence

    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise UsageError("do_lower_case needs a fast tokenizer (tokenizer.json)")
    normalizer = backend.normalizer
    inner = list(normalizer) if isinstance(normalizer, Sequence) else [normalizer]
    if any(isinstance(n, Lowercase) for n in inner):
        return
    parts = [Lowercase()] + (
        list(normalizer) if isinstance(normalizer, Sequence) else [normalizer] if normalizer else []
    )
    backend.normalizer = Sequence(parts)


def plain_modules(path: str) -> SentenceModules:
    """A plain base model under `--kind embedding`: mean pooling, nothing after it."""
    return SentenceModules(path, ("mean",), True, ())


def read_modules(path: str) -> SentenceModules:
    """The modules of the sentence-transformers folder `path` (UsageError: one it cannot reproduce)."""
    entries = sorted(json_file(os.path.join(path, MODULES_FILE), path), key=lambda e: e.get("idx", 0))
    kinds = [str(e.get("type", "")).rsplit(".", 1)[-1] for e in entries]
    if not kinds or kinds[0] != "Transformer" or kinds[1:2] != ["Pooling"]:
        raise UsageError(
            f"cannot load model {path}: scorecli reads sentence-transformers folders whose modules are "
            f"Transformer, Pooling, then Dense or Normalize; this one has {', '.join(kinds) or 'none'}"
        )
    transformer_dir = os.path.join(path, entries[0].get("path") or "")
    steps: list[Dense | str] = []
    for entry, kind in zip(entries[2:], kinds[2:]):
        where = os.path.join(path, entry.get("path") or "")
        if kind == "Dense":
            steps.append(read_dense(where))
        elif kind == "Normalize":
            steps.append("normalize")
        else:
            raise UsageError(
                f"cannot load model {path}: its module {entry.get('type')} is not one scorecli reproduces "
                "(it applies Pooling, Dense and Normalize)"
            )
    pooling, include_prompt = _read_pooling(os.path.join(path, entries[1].get("path") or ""))
    bert = transformer_config(transformer_dir)
    message = _read_inputs(bert, transformer_dir, path)
    st = json_if(os.path.join(path, "config_sentence_transformers.json"))
    # a null prompt is an empty one, as sentence-transformers loads it
    prompts = {str(k): "" if v is None else str(v) for k, v in (st.get("prompts") or {}).items()}
    default = st.get("default_prompt_name")
    if default is not None and default not in prompts and default not in ALWAYS_NAMED:
        raise UsageError(  # sentence-transformers refuses to load it too
            f"cannot load model {path}: its default_prompt_name {default!r} names none of its prompts "
            f"({', '.join(sorted(prompts)) or 'none'})"
        )
    return SentenceModules(
        transformer_dir,
        pooling,
        include_prompt,
        tuple(steps),
        prompts,
        prompts.get(default) if default else None,
        st.get("similarity_fn_name"),
        bert.get("max_seq_length"),
        bool(bert.get("do_lower_case", False)),
        message,
        _truncate_dim(st.get("truncate_dim"), path),
    )


def _truncate_dim(value, path: str) -> int | None:
    """A folder's `truncate_dim` (a positive number of dimensions; None: none)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError(
            f"cannot load model {path}: its truncate_dim is {value!r}, not a positive number of dimensions"
        )
    return value


def _read_inputs(bert: dict, transformer_dir: str, path: str) -> MessageMode | None:
    """How the transformer reads text (its `sentence_bert_config.json`): a message mode when it
    declares one (sentence-transformers 6.2 then renders all text as chat messages), else None for
    plain text; UsageError for what scorecli does not reproduce, named."""
    task = bert.get("transformer_task", "feature-extraction")
    modalities = bert.get("modality_config") or {
        "text": {"method": "forward", "method_output_name": "last_hidden_state"}
    }
    text = modalities.get("text") or {}
    reads = "message" if "message" in modalities else "text"
    if task != "feature-extraction" or (reads == "text" and text.get("method_output_name") != "last_hidden_state"):
        raise UsageError(
            f"cannot load model {path}: its transformer reads text as {task} with modalities "
            f"{', '.join(modalities)}; scorecli embeds text with 'feature-extraction' (the last hidden "
            "states)"
        )
    processing = bert.get("processing_kwargs") or {}
    check_load_kwargs(bert, path)
    if changed := changed_kwargs(processing):
        raise UsageError(
            f"cannot load model {path}: its processing_kwargs set {changed}, which scorecli does not reproduce"
        )
    if reads == "text":
        return None
    check_no_processor(transformer_dir, path)  # its processor (not the tokenizer) would render the messages
    return read_mode(modalities["message"] or {}, processing.get("chat_template") or {}, path)


def _read_pooling(where: str) -> tuple[tuple[str, ...], bool]:
    config = json_file(os.path.join(where, "config.json"), where)
    modes = config.get("pooling_mode")
    if modes is None:  # legacy boolean keys; none set means mean
        modes = [mode for key, mode in _LEGACY_POOLING.items() if config.get(key)] or ["mean"]
    modes = (modes,) if isinstance(modes, str) else tuple(modes)
    unknown = [m for m in modes if m not in POOLING_MODES]
    if unknown or not modes:
        raise UsageError(f"cannot load model {where}: unknown pooling mode {unknown[0] if unknown else 'none'}")
    return modes, bool(config.get("include_prompt", True))


def read_dense(where: str, on: str = "sentence_embedding", weights: str | None = None) -> Dense:
    """The Dense module in folder `where`, applied to `on` (a sentence embedding, or each token's
    `token_embeddings`); `weights`: its safetensors file when not the folder's own."""
    config = json_file(os.path.join(where, "config.json"), where) if weights is None else {}
    activation = config.get(
        "activation_function", "torch.nn.modules.linear.Identity" if weights else "torch.nn.modules.activation.Tanh"
    )
    if activation not in _ACTIVATIONS:
        raise UsageError(f"cannot load model {where}: Dense activation {activation} is not one scorecli applies")
    for key in ("module_input_name", "module_output_name"):
        if config.get(key, config.get("module_input_name", on)) != on:
            raise UsageError(f"cannot load model {where}: a Dense module on {config[key]!r}, not {on}")
    weights = weights or os.path.join(where, "model.safetensors")
    if not os.path.isfile(weights):
        raise UsageError(f"cannot load model {where}: its Dense module has no model.safetensors weights")
    from safetensors.torch import load_file

    tensors = load_file(weights)
    try:
        weight = tensors["linear.weight"].float()
    except KeyError as exc:
        raise UsageError(f"cannot load model {weights}: no linear.weight") from exc
    bias = tensors.get("linear.bias") if config.get("bias", weights is None) else None
    residual = tensors.get("residual.weight")
    return Dense(
        weight,
        None if bias is None else bias.float(),
        activation,
        None if residual is None else residual.float(),
        bool(config.get("use_residual", False)),
    )


# prompt names every model sentence-transformers 6 loads has: empty when its folder names none
# (`encode(prompt_name="query")` on all-MiniLM-L6-v2 is no prompt, not the text "query")
ALWAYS_NAMED = ("query", "document")


def prompt_text(given: str | None, modules: SentenceModules, names: tuple[str, ...]) -> str:
    """A text's prompt: `given` (a prompt name of the model, `ALWAYS_NAMED` included, else literal
    text), else the model's prompt of the first of `names` it defines, else its default prompt,
    else none."""
    if given is not None:
        return modules.prompts.get(given, "" if given in ALWAYS_NAMED else given)
    return next((modules.prompts[n] for n in names if n in modules.prompts), modules.default_prompt or "")


def prompt_length(tokenizer, prompt: str, modules: SentenceModules, cut: int) -> int:
    """Leading tokens of a prompted text that pooling skips: none unless the Pooling module
    excludes the prompt; then the prompt's tokens, as sentence-transformers counts them (with
    the tokenizer's special tokens, cut at the text's `cut` as its texts are, less a trailing
    one: a prompt longer than the cut leaves the text's last special token pooled)."""
    if modules.include_prompt or not prompt:
        return 0
    ids = tokenizer(prompt, truncation=True, max_length=cut)["input_ids"]
    return len(ids) - (1 if ids and ids[-1] in set(tokenizer.all_special_ids) else 0)


def pool(hidden: torch.Tensor, lens: torch.Tensor, skip: torch.Tensor, modes: tuple[str, ...]) -> torch.Tensor:
    """Pool ragged token states per text, as sentence-transformers' Pooling does.

    Args:
        hidden: [T, H] float32, the texts' tokens one after another.
        lens: [S] int64 tokens of each text; skip: [S] int64 leading tokens not pooled (a prompt).
        modes: pooling modes, concatenated in order.
    Returns:
        [S, H * len(modes)] float32. A text with nothing left to pool gets what sentence-transformers'
        padded path gives: its first token (cls), zeros (mean, lasttoken), -inf (max).
    """
    s, h = lens.shape[0], hidden.shape[1]
    starts = torch.cumsum(lens, 0) - lens  # [S]
    seq = torch.repeat_interleave(torch.arange(s, device=hidden.device), lens)  # [T]
    pos = torch.arange(hidden.shape[0], device=hidden.device) - starts[seq]  # [T] position within its text
    keep = pos >= skip[seq]  # [T]
    count = (lens - skip).clamp(min=0).to(hidden.dtype)[:, None]  # [S, 1]
    kept = hidden * keep[:, None].to(hidden.dtype)
    out = []
    for mode in modes:
        if mode == "cls":
            out.append(hidden[starts + torch.where(lens > skip, skip, 0)])
        elif mode == "lasttoken":
            out.append(hidden[starts + lens - 1] * (lens > skip).to(hidden.dtype)[:, None])
        elif mode in ("mean", "mean_sqrt_len_tokens"):
            total = torch.zeros(s, h, dtype=hidden.dtype, device=hidden.device).index_add_(0, seq, kept)
            denominator = count.clamp(min=1e-9)
            out.append(total / (denominator if mode == "mean" else denominator.sqrt()))
        elif mode == "max":
            masked = hidden.masked_fill(~keep[:, None], float("-inf"))
            full = torch.full((s, h), float("-inf"), dtype=hidden.dtype, device=hidden.device)
            out.append(full.scatter_reduce(0, seq[:, None].expand(-1, h), masked, reduce="amax"))
        else:  # weightedmean: weights are positions + 1, a prompt's tokens excluded
            weights = ((pos + 1) * keep).to(hidden.dtype)[:, None]  # [T, 1]
            total = torch.zeros(s, h, dtype=hidden.dtype, device=hidden.device).index_add_(0, seq, hidden * weights)
            norm = torch.zeros(s, 1, dtype=hidden.dtype, device=hidden.device).index_add_(0, seq, weights)
            out.append(total / norm.clamp(min=1e-9))
    return torch.cat(out, dim=-1)


def similarity(queries: torch.Tensor, items: torch.Tensor, name: str) -> torch.Tensor:
    """[N] float32 similarity of row-aligned query and item embeddings [N, D] (float32), as
    sentence-transformers' `cos_sim` (both normalized, eps 1e-12) or `dot_score` computes it; the
    products are summed in float64 (a float32 sum of D products differs with its order by
    ~1e-7 of |q| |e|, more than 1e-5 for large unnormalized embeddings)."""
    if name == "cosine":
        queries, items = F.normalize(queries, p=2, dim=-1), F.normalize(items, p=2, dim=-1)
    return (queries.double() * items.double()).sum(dim=-1).float()
