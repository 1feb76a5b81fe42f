"""`scorecli inspect`: what scorecli sees in a checkpoint, without loading its weights
(`describe`), and with `--check` whether it reproduces the model's own forward (`check`)."""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import sys
import textwrap

from scorecli.checks.selfcheck import SelfCheckError
from scorecli.config import ScoreConfig
from scorecli.errors import Notice
from scorecli.kinds import KINDS, family_class
from scorecli.model.default_model import BUNDLED, default_said
from scorecli.model.tokenizer import load_tokenizer


def _columns() -> int | None:
    """The width to wrap `inspect`'s lines to (None: do not wrap)."""
    given = os.environ.get("COLUMNS", "")
    if given.isdigit() and int(given) >= 40:
        return int(given)
    return shutil.get_terminal_size((80, 24)).columns if sys.stdout.isatty() else None


def fitted(lines: list[str], width: int | None = None) -> list[str]:
    """`lines` wrapped to `$COLUMNS` where it is set, else to the terminal's width when stdout is
    one (a pipe or file gets whole lines, for scripts), each continuation indented under its
    value (`label:   value`); a line holding a word (a path) too long to fit stays whole."""
    width = width or _columns()
    if not width:
        return list(lines)
    out = []
    for line in lines:
        lead = re.match(r"\s*[^:\s][^:]{0,24}:\s+|\s*\S+\s{2,}|\s*", line)
        indent = " " * len(lead.group(0) if lead else "")
        if len(line) <= width or max(map(len, line.split())) > width - len(indent):
            out.append(line)
            continue
        out.extend(textwrap.wrap(line, width, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False))
    return out


def describe(
    model: str,
    label_tokens: tuple[str, ...] | None,
    trust_remote_code: bool,
    cache_dir: str | None = None,
    mis_line: bool = True,
    name: str | None = None,
) -> list[str]:
    """Lines describing the model: kind, architecture, labels, sizes, MIS, label tokens. The
    checkpoint is opened, its kind detected and its labels named as a run does (`model`, `spec`).
    `mis_line` False: no "multi-item" line from the config alone (`check` gives the real one).
    `name`: how the user named it (a bundled model's short name), when not its path."""
    from scorecli.kinds.spec import label_tokens_refused, refuse, sequence_limit
    from scorecli.model.load import open_checkpoint, read_checkpoint
    from scorecli.model.sentence import transformer_folder

    cfg = ScoreConfig(model=model, trust_remote_code=trust_remote_code, cache_dir=cache_dir)
    path, config, kind = open_checkpoint(cfg)
    info, checkpoint = KINDS[kind], read_checkpoint(path, cfg)
    tokenizer = load_tokenizer(transformer_folder(path) if checkpoint.folder_type is not None else path, cfg)
    archs = getattr(config, "architectures", None) or ["?"]
    skeleton = _skeleton(config, trust_remote_code)
    family = family_class(kind)
    more, own, multi = family.inspect_lines(kind, checkpoint, skeleton, tokenizer)
    lines = [
        f"model:          {name} ({model})" if name and name != model else f"model:          {model}",
        f"kind:           {kind} ({info.help})",
        f"architecture:   {archs[0]} ({config.model_type})",
        f"scores:         {family.scores_line(kind, checkpoint)}",
        *more,
    ]
    limit, why = sequence_limit(skeleton, kind), ""
    if own is not None and own < limit:  # as a run cuts them (the kind's spec), unless --max-seq-len says otherwise
        limit, why = own, f": the model's max_seq_length; --max-seq-len up to {sequence_limit(skeleton, kind)}"
    lines += [
        f"hidden size:    {getattr(config, 'hidden_size', '?')}",
        f"max positions:  {getattr(config, 'max_position_embeddings', None)} (scorecli cuts sequences at {limit} "
        f"tokens{why})",
        f"vocabulary:     {len(tokenizer)} tokens; {_specials(tokenizer)}",
        f"chat template:  {'yes' if getattr(tokenizer, 'chat_template', None) else 'no'}",
    ] + (["multi-item:     " + multi] if mis_line else [])
    if not info.label_tokens:  # refused as a run refuses them
        refuse([label_tokens_refused(kind, dataclasses.replace(cfg, label_tokens=label_tokens or None))])
    for token in label_tokens or ():
        ids = tokenizer.encode(token, add_special_tokens=False)
        verdict = "ok" if len(ids) == 1 else f"NOT a single token ({len(ids)} tokens)"
        lines.append(f"label token:    {token!r} -> {ids} {verdict}")
    return lines


def _specials(tokenizer) -> str:
    """What the tokenizer adds around a text: `adds [CLS] before and [SEP] after a text`."""
    probe = "scorecli probe"
    full = tokenizer(probe, add_special_tokens=True)["input_ids"]
    bare = tokenizer(probe, add_special_tokens=False)["input_ids"]
    start = next((k for k in range(len(full) - len(bare) + 1) if full[k : k + len(bare)] == bare), 0)
    before, after = full[:start], full[start + len(bare) :]
    tokens = ((before, "before"), (after, "after"))
    said = [f"{' '.join(tokenizer.convert_ids_to_tokens(ids))} {where}" for ids, where in tokens if ids]
    return f"adds {' and '.join(said)} a text" if said else "adds no special tokens to a text"


def bundled_lines() -> list[str]:
    """The models the set-up installs, by short name (`default_model`), and where they are."""
    lines = [f"bundled models (--model NAME; without --model: {default_said()}):"]
    for b in BUNDLED.values():
        where = b.path()
        lines.append(f"  {b.name:<15} {b.what}")
        lines.append(f"  {'':<15} {where if where else 'not installed: ' + b.install}")
    return lines


def _skeleton(config, trust_remote_code: bool):
    """The model's module tree on the meta device (no weights read, no memory used)."""
    import torch
    from transformers import AutoModel

    with torch.device("meta"):
        return AutoModel.from_config(config, trust_remote_code=trust_remote_code)


def check(
    model: str,
    label_tokens: tuple[str, ...] | None,
    trust_remote_code: bool,
    cache_dir: str | None = None,
    device: str = "auto",
    dtype: str = "auto",
    attention: str = "auto",
) -> tuple[list[str], bool]:
    """Load the weights and run the start-up self-check (`scorecli.checks.selfcheck`) in every mode
    the model supports. Returns (lines, whether every mode passed)."""
    import warnings

    from scorecli.kinds.spec import any_label_ids
    from scorecli.model.load import load_model
    from scorecli.scorer import Scorer

    cfg = ScoreConfig(
        model=model,
        trust_remote_code=trust_remote_code,
        cache_dir=cache_dir,
        device=device,
        dtype=dtype,
        attention=attention,
    )
    loaded = load_model(cfg)
    if KINDS[loaded.kind].label_tokens and loaded.sentence is None:  # a CrossEncoder folder names its own
        labels = {"label_tokens": label_tokens} if label_tokens else {"label_token_ids": any_label_ids(loaded)}
        cfg = dataclasses.replace(cfg, **labels)
    lines, ok, modes = [], True, ("single",)
    if KINDS[loaded.kind].similarity:  # no packing to ask about: query and items run apart
        lines.append("mode:           single (query and items encoded as their own sequences)")
    elif KINDS[loaded.kind].pairs:  # single by its nature: packed items would attend to each other
        lines.append("mode:           single (bidirectional encoder: each (query, item) pair is its own sequence)")
    elif KINDS[loaded.kind].scorecli_attention:
        from scorecli.model.compat import support

        allowed = support(loaded.model, loaded.kind)  # a model no mode reproduces: UsageError, one line
        modes = ("mis", "single") if allowed.packed else ("single",)
        lines.append(
            "mode:           "
            + ("mis (--mode auto)" if allowed.packed else f"single-item only (--mode auto): {allowed.reason}")
        )
    for mode in modes:
        try:
            with warnings.catch_warnings():
                if mode != modes[0]:  # the notes of a run of this model (a 3-label `score`) were said once
                    warnings.simplefilter("ignore", Notice)
                scorer = Scorer(loaded, dataclasses.replace(cfg, mode=mode))
            outcome = scorer.metadata["self_check"]
            where = f"{mode}, {scorer.backend_name}, {str(loaded.dtype).removeprefix('torch.')} on {loaded.device}"
        except SelfCheckError as exc:
            ok, where, outcome = (
                False,
                f"{mode}, --attention {attention}",
                "FAILED: " + str(exc).removeprefix("self-check: "),
            )
        lines.append(f"self-check:     {outcome} ({where})")
    return lines, ok
