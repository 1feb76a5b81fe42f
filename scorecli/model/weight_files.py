"""What is wrong with a model folder's weight files, said in one line (docs/models.md: Loading models).

transformers' own errors for a folder whose weights cannot be read name the symptom, not the
folder's state: a shard its index names but the folder lacks and a folder with no weights at all
both read as "no safetensors" under `use_safetensors=True`, a pickle holding more than tensors as
torch's advice to load it unsafely, a quantized checkpoint as a missing package. Each function here
looks at the folder (or the config) and says what a user can act on. Knows nothing about kinds,
rows or devices; imports no torch.
"""

from __future__ import annotations

import json
import os

# the pickled weight files transformers reads (`pytorch_model.bin`, its shards, `*.pt`), where safetensors are refused
_PICKLES = (".bin", ".pt", ".pth", ".ckpt")
_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")


def missing_weights(path: str, exc: BaseException, allow_pickle: bool) -> str | None:
    """Why transformers found no weights to load in folder `path` (None: something else, or not a
    local folder): a shard its index names is not there, or there are no weight files at all, or
    only pickled ones without `allow_pickle`."""
    if not os.path.isdir(path):
        return None
    names = os.listdir(path)
    index = next((n for n in _INDEXES if n in names), None)
    if isinstance(exc, FileNotFoundError) or index:
        gone = _missing_shards(path, index) if index else []
        if gone:
            more = f" (and {len(gone) - 1} more)" if len(gone) > 1 else ""
            return f"{index} names {gone[0]}{more}, which is not in the folder (an incomplete download or copy?)"
    broken = sorted(n for n in names if n.endswith((".safetensors", *_PICKLES)) and not _exists(path, n))
    if broken:  # a link whose target is gone (a Hugging Face cache's snapshot after its blob was removed)
        link = os.path.join(path, broken[0])
        return f"its weight file {broken[0]} is a link to {os.readlink(link)}, which does not exist"
    if any(n.endswith(".safetensors") for n in names):
        return None
    pickles = sorted(n for n in names if n.endswith(_PICKLES))
    if pickles and not allow_pickle:
        return (
            f"no safetensors weights, only pickled ones ({pickles[0]}), which can run code; "
            "pass --allow-pickle if you trust them"
        )
    if not pickles:
        return "no weight files in the folder (model.safetensors, or shards with model.safetensors.index.json)"
    return None


def _missing_shards(path: str, index: str) -> list[str]:
    """The files the weight index in `path` maps tensors to that the folder lacks, sorted."""
    try:
        with open(os.path.join(path, index), encoding="utf-8") as f:
            weight_map = json.load(f).get("weight_map") or {}
    except (OSError, ValueError, AttributeError):
        return []
    return sorted({f for f in weight_map.values() if not os.path.isfile(os.path.join(path, str(f)))})


def _exists(path: str, name: str) -> bool:
    """Whether `name` in folder `path` is there to read (False: a link to nothing)."""
    return os.path.exists(os.path.join(path, name))


def unsafe_pickle(path: str) -> str:
    """The line for a pickled checkpoint that `torch.load(weights_only=True)` refused: it holds
    objects other than tensors, whose unpickling could run code."""
    pickles = sorted(n for n in os.listdir(path) if n.endswith(_PICKLES)) if os.path.isdir(path) else []
    where = f"its pickled weights ({pickles[0]})" if pickles else "its pickled weights"
    return (
        f"{where} hold objects other than tensors, whose loading could run code; scorecli loads pickles "
        "as plain tensors only (even with --allow-pickle): convert the checkpoint to safetensors where you trust it"
    )


def quantization(hf_config) -> str | None:
    """The quantization method a checkpoint's config names (`quantization_config`), if any."""
    quant = getattr(hf_config, "quantization_config", None)
    if quant is None:
        return None
    method = quant.get("quant_method") if isinstance(quant, dict) else getattr(quant, "quant_method", None)
    return str(getattr(method, "value", method) or "unknown method")


def corrupt_safetensors(path: str) -> str | None:
    """The first safetensors file in folder `path` whose header cannot be read, if any."""
    from safetensors import safe_open

    if not os.path.isdir(path):
        return None
    for name in sorted(f for f in os.listdir(path) if f.endswith(".safetensors")):
        try:
            with safe_open(os.path.join(path, name), "pt"):
                pass
        except Exception:  # noqa: BLE001 - any failure to open names the file
            return os.path.join(path, name)
    return None
