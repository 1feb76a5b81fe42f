"""`scorecli inspect`: what scorecli sees in a checkpoint, without loading its weights
(`describe`), and with `--check` whether it reproduces the model's own forward (`check`)."""

from __future__ import annotations



def describe(model: str, label_tokens: tuple[str, ...] | None, trust_remote_code: bool, cache_dir: str | None = None,
             mis_line: bool = True) -> list[str]:  # fmt: skip
    """Lines describing the model: kind, architecture, labels, sizes, MIS, label tokens. The
    checkpoint is opened, its kind detected and its labels named as a run does (`model`, `spec`).
    `mis_line` False: no "multi-item" line from the config alone (`check` gives the real one)."""
    from scorecli.config import ScoreConfig
    from scorecli.core.encode import leading_special_ids
    from scorecli.model.load import load_tokenizer, open_checkpoint
    from scorecli.kinds.spec import class_names, sequence_limit

    cfg = ScoreConfig(model=model, trust_remote_code=trust_remote_code, cache_dir=cache_dir)
    path, config, kind = open_checkpoint(cfg)
    from scorecli.model.sentence import is_sentence_folder, transformer_folder

    tokenizer = load_tokenizer(transformer_folder(path) if is_sentence_folder(path) else path, cfg)
    archs = getattr(config, "architectures", None) or ["?"]
    max_pos = getattr(config, "max_position_embeddings", None)
    names = class_names(config)
    lines = [
        f"model:          {model}",
        f"kind:           {kind}",
        f"architecture:   {archs[0]} ({config.model_type})",
        f"labels:         {len(names) if kind != 'causal-lm' else 'label tokens (pass --label-tokens)'}",
    ]
    if kind == "embedding":
        lines[-1] = "labels:         1 (similarity)"
    elif kind != "causal-lm":
        lines.append("label names:    " + ", ".join(names))
    skeleton = _skeleton(config, trust_remote_code)
    if kind == "embedding":
        lines += _embedding_lines(model, path, config)
    lines += [
        f"hidden size:    {getattr(config, 'hidden_size', '?')}",
        f"max positions:  {max_pos} (scorecli caps sequences at {sequence_limit(skeleton)})",
        f"vocabulary:     {len(tokenizer)} tokens; adds BOS: {'yes' if leading_special_ids(tokenizer) else 'no'}",
        f"chat template:  {'yes' if getattr(tokenizer, 'chat_template', None) else 'no'}",
    ] + (["multi-item:     " + _multi_item(kind, skeleton)] if mis_line else [])
    for token in label_tokens or ():
        ids = tokenizer.encode(token, add_special_tokens=False)
        verdict = "ok" if len(ids) == 1 else f"NOT a single token ({len(ids)} tokens)"
        lines.append(f"label token:    {token!r} -> {ids} {verdict}")
    return lines


def _embedding_lines(model: str, path: str, config) -> list[str]:
    """An embedding model's text (plain, or chat messages), pooling, modules after it, prompts and
    similarity (README: Which models, embedding models)."""
    from scorecli.model.sentence import is_sentence_folder, plain_modules, prompt_text, read_modules

    modules = read_modules(path) if is_sentence_folder(path) else plain_modules(path)
    modules = modules.resolved(modules.transformer_dir, config)
    after = [f"Dense -> {s.weight.shape[0]}" if not isinstance(s, str) else "Normalize" for s in modules.steps]
    prompts = ", ".join(f"{name}: {text!r}" for name, text in modules.prompts.items()) or "none"
    excluded = not modules.include_prompt and modules.message is None  # a chat message's prompt is pooled
    text = "plain text, after its prompt" if modules.message is None else (
        f"chat messages ({modules.message.format} format) through the chat template, the prompt as a system message")
    return [
        f"text:           {text}",
        f"pooling:        {' + '.join(modules.pooling)}{' (prompt excluded)' if excluded else ''}"
        + (f", then {', '.join(after)}" if after else ""),
        f"embedding size: {modules.dimension(getattr(config, 'hidden_size', 0))}",
        f"prompts:        {prompts}; query uses {prompt_text(None, modules, ('query',))!r}, items "
        f"{prompt_text(None, modules, ('document', 'passage'))!r}",
        f"similarity:     {modules.similarity or 'cosine'}",
        f"max length:     {modules.max_seq_length} tokens",
    ]


def _multi_item(kind: str, skeleton) -> str:
    """Whether MIS applies, as far as the config and module types tell (`--check` runs the rest)."""
    from scorecli.model.compat import stateful_reason

    if kind == "cross-encoder":
        return "no (bidirectional encoder: single-item)"
    if kind == "embedding":
        return "no (query and items are embedded as their own sequences)"
    reason = stateful_reason(skeleton)
    if reason:
        return f"no: single-item only ({reason})"
    # whether its attention goes through scorecli's backend takes a forward: `check` runs it
    return "yes (MIS by default), if its attention goes through transformers' attention interface (--check tells)"


def _skeleton(config, trust_remote_code: bool):
    """The model's module tree on the meta device (no weights read, no memory used)."""
    import torch
    from transformers import AutoModel

    with torch.device("meta"):
        return AutoModel.from_config(config, trust_remote_code=trust_remote_code)


def check(model: str, label_tokens: tuple[str, ...] | None, trust_remote_code: bool, cache_dir: str | None = None,
          device: str = "auto", dtype: str = "auto", attention: str = "auto") -> tuple[list[str], bool]:  # fmt: skip
    """Load the weights and run the start-up self-check (`scorecli.checks.selfcheck`) in every mode
    the model supports. Returns (lines, whether every mode passed)."""
    import dataclasses

    from scorecli.config import ScoreConfig
    from scorecli.model.load import load_model
    from scorecli.scorer import Scorer
    from scorecli.checks.selfcheck import SelfCheckError
    from scorecli.kinds.spec import any_label_ids

    cfg = ScoreConfig(model=model, trust_remote_code=trust_remote_code, cache_dir=cache_dir, device=device,
                      dtype=dtype, attention=attention)  # fmt: skip
    loaded = load_model(cfg)
    if loaded.kind == "causal-lm":
        labels = {"label_tokens": label_tokens} if label_tokens else {"label_token_ids": any_label_ids(loaded)}
        cfg = dataclasses.replace(cfg, **labels)
    lines, ok, modes = [], True, ("single",)
    if loaded.kind != "cross-encoder":
        from scorecli.model.compat import support

        allowed = support(loaded.model, loaded.kind)  # a model no mode reproduces: UsageError, one line
        modes = ("mis", "single") if allowed.packed else ("single",)
        lines.append("mode:           " + ("mis (--mode auto)" if allowed.packed
                                           else f"single-item only (--mode auto): {allowed.reason}"))  # fmt: skip
    for mode in modes:
        try:
            scorer = Scorer(loaded, dataclasses.replace(cfg, mode=mode))
            outcome = scorer.metadata["self_check"]
            where = f"{mode}, {scorer.backend_name}, {str(loaded.dtype).removeprefix('torch.')} on {loaded.device}"
        except SelfCheckError as exc:
            ok, where, outcome = False, f"{mode}, --attention {attention}", "FAILED: " + str(exc).removeprefix("self-check: ")
        lines.append(f"self-check:     {outcome} ({where})")
    return lines, ok
