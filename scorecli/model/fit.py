"""Whether a checkpoint's weights fit the model its config describes (docs/cli.md: Exit codes).

transformers loads what it can and reports the rest: weights the model needs but the checkpoint
lacks (randomly initialised), weights of another shape, and weights the model never reads. Each
would make scores meaningless without a word, so each is a one-line UsageError naming the first
few tensors: a config with fewer layers than its weights (`num_hidden_layers: 1` over two layers)
leaves the second layer's weights unused. Weights outside the model's body that a kind does not
read by design (a classifier head under `--kind embedding`, an LM head beside a score head) are
not the config's fault: a warning when `--kind` chose that kind. Knows nothing about rows, files
or devices.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

from scorecli.errors import UsageError


@dataclass(frozen=True)
class Kinds:
    """The kind a model is loaded as, the one `--kind` gave (None: detected), and the one its
    config says (None: it does not say), for a hint when they differ."""

    kind: str
    given: str | None
    detected: str | None


def check_report(model: Any, info: dict, name: str, kinds: Kinds, embedding: bool) -> None:
    """Refuse a load whose report (`output_loading_info`) says the weights do not fit.

    Args:
        model: the loaded transformers model.
        info: its loading report: missing, unexpected and mismatched keys.
        name: the model as the user named it.
        kinds: the kind it is loaded as, `--kind`, the kind its config says.
        embedding: the kind embeds with the base model (a BERT pooler's weights are never read).
    Raises:
        UsageError: weights missing, of another shape, or unused inside the model's body.
    """
    unread = set(info.get("missing_keys") or ())
    if embedding:
        unread = {k for k in unread if not k.startswith("pooler.")}
    if unread:
        raise UsageError(
            f"cannot load model {name} as {kinds.kind}: its checkpoint has no weights for {some(sorted(unread))}, "
            f"which would be randomly initialised (meaningless scores); {kind_hint(model.config, kinds)}"
        )
    shapes = sorted(info.get("mismatched_keys") or (), key=lambda k: k[0])
    if shapes:
        key, saved, wanted = shapes[0]
        more = f" (and {len(shapes) - 1} more)" if len(shapes) > 1 else ""
        raise UsageError(
            f"cannot load model {name}: its config does not fit its weights: {key} is {_shape(saved)} in the "
            f"checkpoint, {_shape(wanted)} by the config{more} (a config.json from another model?)"
        )
    unused = sorted(set(info.get("unexpected_keys") or ()) - _buffers(model))
    body = [k for k in unused if _in_body(model, k)]
    if body:
        raise UsageError(
            f"cannot load model {name}: its checkpoint holds weights its config leaves unused ({some(body)}): "
            f"{_layers(model.config)}the config does not describe these weights (a config.json from another model?)"
        )
    if unused and kinds.given:
        warnings.warn(
            f"model {name}: --kind {kinds.kind} leaves checkpoint weights unused ({some(unused)}); "
            f"{kind_hint(model.config, kinds)}",
            UserWarning,
            stacklevel=4,
        )


def _buffers(model: Any) -> set[str]:
    """The model's buffers (`position_ids`, `token_type_ids`: tensors it builds, not weights), by
    their names in the model and in its base model. Older saves wrote them to the checkpoint (the
    real all-MiniLM-L6-v2 holds `embeddings.position_ids`): transformers 5.2 reports each as an
    unexpected key, 5.24 still reports all but `position_ids`."""
    names = {name for name, _ in model.named_buffers()}
    prefix = getattr(model, "base_model_prefix", "")
    return names | {name[len(prefix) + 1 :] for name in names if prefix and name.startswith(prefix + ".")}


def _in_body(model: Any, key: str) -> bool:
    """Whether checkpoint key `key` names a weight inside the model's body (its base model: the
    embeddings, layers and norms every kind runs), not a head beside it."""
    base = getattr(model, "base_model", model)
    prefix = getattr(model, "base_model_prefix", "")
    if prefix and key.startswith(prefix + "."):
        key = key[len(prefix) + 1 :]
    first = key.split(".", 1)[0]
    return first in dict(base.named_children()) or first in dict(base.named_parameters(recurse=False))


def _layers(hf_config: Any) -> str:
    layers = getattr(hf_config, "num_hidden_layers", None)
    return f"it says num_hidden_layers {layers}; " if isinstance(layers, int) else ""


def _shape(size: Any) -> str:
    return "x".join(map(str, tuple(size))) or "a scalar"


def config_problem(hf_config: Any) -> str | None:
    """What in a config makes transformers' model class fail to build, said in its terms (None:
    nothing scorecli knows of)."""
    pad, vocab = getattr(hf_config, "pad_token_id", None), getattr(hf_config, "vocab_size", None)
    if isinstance(pad, int) and isinstance(vocab, int) and not 0 <= pad < vocab:
        return f"its config's pad_token_id {pad} is not a token of its vocabulary (0 to {vocab - 1})"
    return None


def some(names: list[str], shown: int = 3) -> str:
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


def kind_hint(hf_config: Any, kinds: Kinds) -> str:
    archs = getattr(hf_config, "architectures", None) or [hf_config.model_type]
    if kinds.given and kinds.detected and kinds.detected != kinds.given:
        return f"the checkpoint is a {archs[0]}: use --kind {kinds.detected} (or leave --kind out)"
    if kinds.given:
        return f"the checkpoint is a {archs[0]}"
    return (
        f"the checkpoint is a {archs[0]} without trained weights for a {kinds.kind} head: "
        "use a model trained for scoring"
    )
