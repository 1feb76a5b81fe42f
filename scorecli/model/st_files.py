"""A sentence-transformers model folder's files, read without torch: whether a folder is one
(`modules.json`), the subfolders its modules live in, and its JSON files, unreadable ones refused
in one line naming the model. `model.sentence` builds the modules from them; a job's fingerprint
(`engine.job`) stamps the modules' files before any model is loaded, or when none is (a job whose
pairs are all in the score cache). Knows nothing about tensors, rows or output.
"""

from __future__ import annotations

import json
import os

from scorecli.errors import UsageError

MODULES_FILE = "modules.json"


def is_sentence_folder(path: str) -> bool:
    """Whether `path` is a local sentence-transformers model folder."""
    return os.path.isfile(os.path.join(path, MODULES_FILE))


def json_file(path: str, name: str, missing_ok: bool = False) -> dict | list:
    """The JSON in file `path` (UsageError naming model `name`: unreadable); `missing_ok`: {} when absent."""
    if missing_ok and not os.path.isfile(path):
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot load model {name}: cannot read {os.path.basename(path)} ({exc})") from exc


def json_if(path: str) -> dict:
    """The JSON object in file `path`, {} when there is no such file."""
    return json_file(path, path, missing_ok=True)  # type: ignore[return-value]


# the names sentence-transformers reads a Transformer module's config under, in this order (older
# releases saved `sentence_distilbert_config.json` and kin beside a DistilBERT, RoBERTa, ...)
TRANSFORMER_CONFIGS = tuple(
    f"sentence_{name}_config.json"
    for name in ("bert", "roberta", "distilbert", "camembert", "albert", "xlm-roberta", "xlnet")
)


def transformer_config(folder: str, name: str | None = None) -> dict:
    """A Transformer module's config in `folder`: the first of `TRANSFORMER_CONFIGS` that holds
    something, as sentence-transformers reads it; {} when none does (`name`: the model to name when
    one cannot be read)."""
    for file in TRANSFORMER_CONFIGS:
        if config := json_file(os.path.join(folder, file), name or folder, missing_ok=True):
            return config  # type: ignore[return-value]
    return {}


# tokenizer arguments a folder's processing_kwargs may set without changing the token ids
SAME_IDS = frozenset({"padding", "padding_side", "pad_to_multiple_of", "return_tensors", "return_attention_mask"})


# what a Transformer's config passes on to the tokenizer it loads (`tokenizer_args`, in 6.x
# `processor_kwargs`), to the model and to its config; the arguments that change no token and no score
LOAD_KWARGS = ("tokenizer_args", "processor_kwargs", "model_args", "model_kwargs", "config_args", "config_kwargs")
SAME_LOAD = frozenset(
    {"trust_remote_code", "local_files_only", "cache_dir", "revision", "token", "use_auth_token", "padding_side"}
    | {"torch_dtype", "dtype", "attn_implementation", "device_map", "low_cpu_mem_usage", "add_pooling_layer"}
)


def check_load_kwargs(bert: dict, name: str) -> None:
    """UsageError naming the first `key.argument` of a Transformer config's load arguments
    (`LOAD_KWARGS`) that may change the tokens or the scores (a tokenizer's `do_lower_case`, ...)."""
    changed = sorted(f"{key}.{arg}" for key in LOAD_KWARGS for arg in (bert.get(key) or {}) if arg not in SAME_LOAD)
    if changed:
        raise UsageError(
            f"cannot load model {name}: its Transformer's config sets {changed[0]}, which scorecli does not reproduce"
        )


def module_entries(path: str) -> tuple[list[dict], list[str]]:
    """(`modules.json`'s entries in their order, each module's class name: `Transformer`, ...)."""
    entries = sorted(json_file(os.path.join(path, MODULES_FILE), path), key=lambda e: e.get("idx", 0))  # type: ignore[arg-type, union-attr]
    return entries, [str(e.get("type", "")).rsplit(".", 1)[-1] for e in entries]


def changed_kwargs(processing: dict, keeps: frozenset[tuple[str, str]] = frozenset()) -> str | None:
    """The first `bucket.key` of a Transformer's `processing_kwargs` that changes the token ids
    (its `chat_template` bucket renders messages, read apart; `keeps`: pairs known to change none),
    or None."""
    changed = sorted(
        f"{bucket}.{key}"
        for bucket, kwargs in processing.items()
        if bucket != "chat_template"
        for key in (kwargs or {})
        if key not in SAME_IDS and (bucket, key) not in keeps
    )
    return changed[0] if changed else None


def check_no_processor(folder: str, name: str) -> None:
    """UsageError when the transformer in `folder` renders chat messages with a multimodal
    processor (its own config file), not through its tokenizer's chat template."""
    for file in ("processor_config.json", "preprocessor_config.json"):
        if os.path.isfile(os.path.join(folder, file)):
            raise UsageError(
                f"cannot load model {name}: it renders chat messages with a multimodal processor "
                f"({file}); scorecli renders text through a tokenizer's chat template"
            )


def default_prompt(path: str) -> tuple[str | None, str]:
    """(the name `config_sentence_transformers.json` gives its default prompt, or None; that
    prompt's text, "" when none)."""
    st = json_if(os.path.join(path, "config_sentence_transformers.json"))
    name = st.get("default_prompt_name")
    return name, str((st.get("prompts") or {}).get(name) or "") if name else ""
