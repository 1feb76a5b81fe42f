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
