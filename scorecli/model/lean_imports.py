"""transformers' model code without the packages only its training, generation and launching use.

Loading any model imports `transformers.modeling_utils`, and with it transformers' loss functions
(the object-detection losses import scipy's optimizer, 0.25 s here) and, in transformers
5.17-5.23, assisted generation (scikit-learn's metrics, which import pandas: 0.6-0.8 s of a
one-row run on a 2-core CPU, more on the GPU machines, whose transformers is 5.17); where
accelerate is installed, transformers imports it, and accelerate imports boto3 for its SageMaker
launcher (0.09 s). A scoring process neither trains, generates nor launches. When the command
line asked for it (`skip_unneeded`, a process-wide choice: a library caller's process may train
or generate later), `import_model_code` imports that shared code with those packages hidden
(`sys.modules[name] = None`: the availability checks answer "not installed" and skip them), then
unhides them and clears transformers' cached answers, so that a model's own module imported
afterwards, and anything else, finds them installed. Should a transformers release import one
unconditionally, the import is simply done again unhidden. Knows nothing about models or runs.
"""

from __future__ import annotations

import importlib
import sys

# packages transformers' shared model code imports only for training losses, generation or
# (through accelerate) launching on SageMaker
UNNEEDED = ("scipy", "sklearn", "boto3")
# what loading any model imports first: the Auto classes (in 5.17-5.23 they import generation
# and with it scikit-learn), the base model class (the loss functions: scipy)
MODEL_CODE = ("transformers.models.auto.auto_factory", "transformers.modeling_utils")
_SKIP: list[bool] = []


def skip_unneeded() -> None:
    """From now on, `import_model_code` leaves `UNNEEDED` out (the command line's processes)."""
    _SKIP.append(True)


def import_model_code(modules: tuple[str, ...] = MODEL_CODE) -> bool:
    """Import `modules` (transformers' shared model code) now; True when that was done with
    `UNNEEDED` hidden, False when they were imported already, not asked to skip, or needed them."""
    if all(module in sys.modules for module in modules) or not _SKIP:
        return False
    hidden = [name for name in UNNEEDED if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]  # import: ModuleNotFoundError; find_spec: None
    _forget_answers(hidden)  # asked before: asked again, while hidden
    try:
        for module in modules:
            importlib.import_module(module)
        done = True
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] not in hidden:  # `import scipy.optimize`: name "scipy.optimize"
            raise
        done = False
    finally:
        for name in hidden:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]
        _forget_answers(hidden)
    if not done:  # a release that imports one of them unconditionally
        for module in modules:
            importlib.import_module(module)
    return done


def _forget_answers(names: list[str]) -> None:
    """transformers caches whether a package is installed (`is_scipy_available`, ...): forget
    the answers given while `names` were hidden."""
    utils = sys.modules.get("transformers.utils.import_utils")
    for name in names:
        check = getattr(utils, f"is_{name}_available", None)
        clear = getattr(check, "cache_clear", None)
        if clear is not None:
            clear()
