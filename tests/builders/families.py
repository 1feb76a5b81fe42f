"""Every decoder family of transformers, discovered from its auto mappings, as a tiny model.

`candidate_types()` lists the model types that have a `*ForSequenceClassification` class
and that scorecli would run as decoders (not one of its encoder types): the decoder families,
and any encoder it does not know by name, which it must refuse. No family is named by hand
except where its config needs fields that must agree (`OVERRIDES`). `build_family(type, dir)`
saves a tiny seeded checkpoint of one family with the tests' BPE tokenizer; `Unbuildable`
says why a family cannot be built small here (an encoder-decoder, a config that does not
shrink, a forward that fails in transformers itself).
"""

from __future__ import annotations

import functools
import warnings

import torch

# sizes of every tiny family; only the fields a config has are set. initializer_range is large
# so that a position or mask error moves scores visibly
SIZES = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "max_position_embeddings": 512,
    "initializer_range": 0.1,
    # local attention: a window that packed MIS rows cross (every P + I_k of the tests fits in it)
    "sliding_window": 64,
    "window_size": 64,
    "local_attention": 64,
    "attention_window": 64,
    # mixtures of experts
    "num_experts": 4,
    "num_local_experts": 4,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 32,
    "n_shared_experts": 1,
    "n_group": 1,
    "topk_group": 1,
    # multi-head latent attention, partial rotary
    "kv_lora_rank": 16,
    "q_lora_rank": 32,
    "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 8,
    "v_head_dim": 16,
    "rotary_dim": 8,
    "index_n_heads": 2,
    "index_head_dim": 16,
    # linear attention and state-space layers
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "linear_key_head_dim": 16,
    "linear_value_head_dim": 16,
    "mamba_d_state": 8,
    "mamba_headdim": 16,
    "mamba_expand": 2,
}

# fields that must agree with the layer count and cannot be derived from SIZES
OVERRIDES = {"gpt_neo": {"attention_types": [[["global", "local"], 1]]}}

# tried in turn until the model builds and runs: some latent-attention families expand keys to
# every head, others keep fewer key heads; some take their rotary width from head_dim
VARIANTS = (
    {},
    {"num_key_value_heads": "num_attention_heads"},
    {"head_dim": 16, "num_key_value_heads": "num_attention_heads"},
)

MAX_PARAMS = 5_000_000  # a family whose tiny config is larger holds sub-models that do not shrink


class Unbuildable(Exception):
    """A family that cannot be built small here (the reason is the message)."""


def candidate_types() -> list[str]:
    """Model types with a sequence classifier that scorecli would run as a decoder."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES

    from scorecli.model.load import ENCODER_TYPES

    return sorted(set(MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES) - ENCODER_TYPES)


def _per_layer(default) -> tuple[int, dict]:
    """A short layer count and the per-layer lists cut to it, keeping one layer of each kind."""
    n = getattr(default, "num_hidden_layers", None)
    if not isinstance(n, int):
        return 2, {}
    lists = {k: v for k, v in default.to_dict().items() if isinstance(v, list) and len(v) == n and k != "architectures"}
    keep = sorted({lst.index(x) for lst in lists.values() for x in lst if isinstance(x, (str, int))})
    keep = (keep + [i for i in range(n) if i not in keep])[: max(2, len(keep))]
    return len(keep), {k: [v[i] for i in keep] for k, v in lists.items()}


def tiny_config(model_type: str, vocab_size: int, pad_token_id: int, variant: dict | None = None):
    """A small config of `model_type` (fields the class does not take are dropped); `variant`:
    fields to set on top (`VARIANTS`)."""
    from transformers import CONFIG_MAPPING

    cls = CONFIG_MAPPING[model_type]
    default = cls()
    kw = {k: v for k, v in SIZES.items() if hasattr(default, k)}
    if hasattr(default, "qk_rope_head_dim"):
        kw["head_dim"] = kw["qk_rope_head_dim"]
    kw.update({k: (kw[v] if isinstance(v, str) and v in kw else v) for k, v in (variant or {}).items()})
    n, lists = _per_layer(default)
    kw.update(lists, num_hidden_layers=n, **OVERRIDES.get(model_type, {}))
    kw.update(vocab_size=vocab_size, pad_token_id=pad_token_id, num_labels=1, tie_word_embeddings=False)
    kw.update(
        {k: pad_token_id for k in ("bos_token_id", "eos_token_id") if hasattr(default, k)}
    )  # inside the vocabulary
    for _ in range(len(kw)):
        try:
            return cls(**kw)
        except Exception as exc:
            bad = [k for k in kw if k in str(exc) and k not in ("vocab_size", "num_labels")]
            if not bad:
                raise Unbuildable(f"config: {type(exc).__name__}: {_line(exc)}") from exc
            kw.pop(bad[0])
    raise Unbuildable("config: no small configuration found")


def _line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]


@functools.cache
def tokenizer():
    from tests.builders.models import build_bpe_tokenizer

    return build_bpe_tokenizer(add_bos=False)


def tiny_model(model_type: str):
    """A seeded tiny `*ForSequenceClassification` of the family, in eval mode (the first of
    `VARIANTS` that builds and runs)."""
    failure = None
    for variant in VARIANTS:
        try:
            return _tiny_model(model_type, variant)
        except Unbuildable as exc:
            failure = failure or exc
    raise failure


def _tiny_model(model_type: str, variant: dict):
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES

    tok = tokenizer()
    config = tiny_config(model_type, len(tok), tok.pad_token_id, variant)
    if getattr(config, "is_encoder_decoder", False):
        raise Unbuildable("an encoder-decoder, not a decoder")
    cls = getattr(transformers, MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES[model_type])
    with warnings.catch_warnings(), torch.device("meta"):
        warnings.simplefilter("ignore")
        try:
            params = sum(p.numel() for p in cls(config).parameters())
        except Exception as exc:
            raise Unbuildable(f"model: {type(exc).__name__}: {_line(exc)}") from exc
    if params > MAX_PARAMS:
        raise Unbuildable(f"{params / 1e6:.0f}M parameters at the smallest sizes (sub-models that do not shrink)")
    torch.manual_seed(0)
    try:
        model = cls(config).eval()
        with torch.inference_mode():
            for attn in ("eager",):  # transformers' own forward runs (eager: the tests' reference)
                model.set_attn_implementation(attn)
                model(input_ids=torch.arange(5, 13)[None], use_cache=False)
    except Exception as exc:
        raise Unbuildable(f"forward: {type(exc).__name__}: {_line(exc)}") from exc
    return model


def build_causal_family(model_type: str, out_dir) -> str:
    """Save a seeded tiny `*ForCausalLM` of the family (for families with no sequence classifier,
    e.g. Bamba, whose Mamba-2 mixer no fork covers: a single-item-only model) and the tokenizer."""
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    from tests.builders.models import _save

    tok = tokenizer()
    torch.manual_seed(0)
    cls = getattr(transformers, MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[model_type])
    return _save(cls(tiny_config(model_type, len(tok), tok.pad_token_id)).eval(), tok, out_dir)


def build_family(model_type: str, out_dir) -> str:
    """Save the family's tiny model and the tests' tokenizer into `out_dir`.

    Raises:
        Unbuildable: the config cannot be built small, or transformers' own forward fails.
    """
    from tests.builders.models import _save

    return _save(tiny_model(model_type), tokenizer(), out_dir)
