"""sentence-transformers 6 `CrossEncoder` folders (`config_sentence_transformers.json`'s
`model_type`): an encoder's, the cross-encoder kind's model with nothing after it, checked for
what the kind would not reproduce (`check_cross_encoder`); a decoder's, a causal LM scored by its
`LogitScore` module or a sequence classifier, read with how `CrossEncoder.predict` renders a
(query, document) pair (`read_decoder_cross_encoder`: docs/models.md, decoders saved as
CrossEncoder folders). Read from the folder's JSON files (`st_files`); sentence-transformers is
never imported. Knows nothing about rows, batches or output.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from scorecli.errors import UsageError
from scorecli.model.messages import MessageMode, read_mode
from scorecli.model.sentence import settled_max_length
from scorecli.model.st_files import (
    changed_kwargs,
    check_no_processor,
    default_prompt,
    json_file,
    json_if,
    module_entries,
)

if TYPE_CHECKING:
    import torch


def check_cross_encoder(path: str) -> None:
    """Refuse (UsageError, one line naming it) what a sentence-transformers 6 `CrossEncoder` folder
    (`modules.json`, `model_type` CrossEncoder) says that the cross-encoder kind would not reproduce:
    modules other than its one Transformer (a sequence classifier in the folder itself, reading
    plain text), a default prompt (`predict` puts it before every query), `do_lower_case`, or
    `processing_kwargs` that change the ids."""
    entries, kinds = module_entries(path)
    if kinds != ["Transformer"] or (entries[0].get("path") or "") != "":
        raise UsageError(
            f"cannot load model {path}: scorecli reads CrossEncoder folders whose one module is a Transformer "
            f"in the folder itself; this one has {', '.join(kinds) or 'none'}"
        )
    bert = json_if(os.path.join(path, "sentence_bert_config.json"))
    text = (bert.get("modality_config") or {"text": {"method_output_name": "logits"}}).get("text") or {}
    task = bert.get("transformer_task", "sequence-classification")
    if task != "sequence-classification" or set(bert.get("modality_config") or {"text"}) != {"text"}:
        raise UsageError(
            f"cannot load model {path}: its Transformer reads {', '.join(bert.get('modality_config') or ['text'])} "
            f"as {task!r}; scorecli's cross-encoders read text pairs with a sequence classifier"
        )
    if text.get("method_output_name", "logits") != "logits":
        raise UsageError(f"cannot load model {path}: its Transformer scores with {text['method_output_name']!r}")
    processing = bert.get("processing_kwargs") or {}
    changed = changed_kwargs(processing)  # (a chat template's kwargs: a text-only Transformer renders none)
    if changed or bert.get("do_lower_case"):
        what = f"processing_kwargs set {changed}" if changed else "do_lower_case is set"
        raise UsageError(f"cannot load model {path}: its {what}, which scorecli's cross-encoders do not reproduce")
    default, prompt = default_prompt(path)
    if prompt:
        raise UsageError(
            f"cannot load model {path}: its default prompt {default!r} ({prompt!r}), which CrossEncoder.predict puts "
            "before every query, is not one scorecli's cross-encoders apply"
        )


@dataclass(frozen=True)
class DecoderCrossEncoder:
    """A sentence-transformers 6 `CrossEncoder` folder whose Transformer is a decoder: a causal LM
    scored by its `LogitScore` module (the true token's logit at the last token, less the false
    token's), or a sequence classifier; and how `CrossEncoder.predict` renders a (query, document)
    pair for it (docs/models.md: Which models, decoders saved as CrossEncoder folders)."""

    transformer_dir: str
    label_ids: tuple[int, ...] | None  # LogitScore's (true, false) or (true,) token ids; None: a classifier
    message: MessageMode | None  # the pair as chat messages through the chat template, or a text pair
    prompt: str = ""  # the default prompt: a system message (chat), else text before the query
    max_seq_length: int | None = None

    def adapt_tokenizer(self, tokenizer) -> None:
        return None

    def to(self, device: torch.device) -> DecoderCrossEncoder:
        return self

    def resolved(self, folder: str, hf_config) -> DecoderCrossEncoder:
        """With `max_seq_length` as sentence-transformers settles it (`settled_max_length`)."""
        if self.max_seq_length is not None:
            return self
        return dataclasses.replace(self, max_seq_length=settled_max_length(folder, hf_config))


def read_decoder_cross_encoder(path: str, causal: bool) -> DecoderCrossEncoder:
    """A sentence-transformers 6 `CrossEncoder` folder around a decoder (`causal`: a causal LM,
    which its LogitScore module scores; else a sequence classifier), as `CrossEncoder.predict`
    scores it; UsageError (one line naming it) for what scorecli does not reproduce: other
    modules, LogitScore on other outputs, do_lower_case, processing_kwargs that change the ids, a
    multimodal processor."""
    entries, kinds = module_entries(path)
    wanted = ["Transformer", "LogitScore"] if causal else ["Transformer"]
    if kinds != wanted or (entries[0].get("path") or "") != "":
        raise UsageError(
            f"cannot load model {path}: scorecli reads CrossEncoder folders of a "
            f"{'causal LM' if causal else 'sequence classifier'} whose modules are {', '.join(wanted)} (the "
            f"Transformer in the folder itself); this one has {', '.join(kinds) or 'none'}"
        )
    bert = json_if(os.path.join(path, "sentence_bert_config.json"))
    task = bert.get("transformer_task", "text-generation" if causal else "sequence-classification")
    want_task = "text-generation" if causal else "sequence-classification"
    modalities = bert.get("modality_config") or {"text": {"method": "forward", "method_output_name": "logits"}}
    if task != want_task or not set(modalities) <= {"text", "message"} or "text" not in modalities:
        raise UsageError(
            f"cannot load model {path}: its Transformer reads {', '.join(modalities)} as {task!r}; scorecli "
            f"reads text pairs with {want_task!r}"
        )
    outputs = {str((m or {}).get("method_output_name", "logits")) for m in modalities.values()}
    if outputs != {"logits"}:
        raise UsageError(f"cannot load model {path}: its Transformer scores with {sorted(outputs - {'logits'})[0]!r}")
    processing = bert.get("processing_kwargs") or {}
    changed = changed_kwargs(processing, keeps=frozenset({("text", "logits_to_keep")}))
    if changed or bert.get("do_lower_case"):
        what = f"processing_kwargs set {changed}" if changed else "do_lower_case is set"
        raise UsageError(f"cannot load model {path}: its {what}, which scorecli does not reproduce")
    label_ids = None
    if causal:
        logit = json_file(os.path.join(path, entries[1].get("path") or "", "config.json"), path)
        if logit.get("module_input_name", "causal_logits") != bert.get("module_output_name", "causal_logits"):
            raise UsageError(
                f"cannot load model {path}: its LogitScore reads {logit.get('module_input_name')!r}, not the "
                "Transformer's logits"
            )
        true, false = logit.get("true_token_id"), logit.get("false_token_id")
        if not isinstance(true, int) or not (false is None or isinstance(false, int)):
            raise UsageError(f"cannot load model {path}: its LogitScore names no true_token_id")
        label_ids = (true,) if false is None else (true, false)
    message = None
    if "message" in modalities:
        check_no_processor(path, path)
        message = read_mode(modalities["message"] or {}, processing.get("chat_template") or {}, path, "logits")
    _, prompt = default_prompt(path)
    return DecoderCrossEncoder(path, label_ids, message, prompt, bert.get("max_seq_length"))
