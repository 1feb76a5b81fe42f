"""Where a model name points (a local folder or file, or a Hub id), and a Hub that cannot be
reached failing in one line within seconds (docs/models.md: Loading models).

Without a network, huggingface_hub retries each request with back-off (about 25 s) and logs a
line per try before transformers raises. `reach` asks the Hub once, with a short timeout, before
anything loads: when it does not answer, the process uses the local Hugging Face cache only
(huggingface_hub's own offline mode), and a model that is not cached there is refused at once.
`HF_HUB_OFFLINE=1` skips the question. Imports no torch: a refusal comes before the heavy imports.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import re
import shutil
import tempfile
import threading
from urllib.parse import urlparse

from scorecli.errors import UsageError

PROBE_SECONDS = 3.0
# whether `reach` turned huggingface_hub's offline mode on (a Hub that did not answer), not the user
_WENT_OFFLINE = threading.Event()

# a name the Hub could hold ("org/name" or a legacy "name"); anything else is a local path
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".json", ".gguf")


def locate(name: str) -> tuple[str, str | None]:
    """(folder or hub id, gguf file name or None); a name that can only be a local path and
    names nothing is refused here, never looked up on the Hub."""
    local = os.path.expanduser(name)
    if os.path.isdir(local):
        ggufs = sorted(f for f in os.listdir(local) if f.endswith(".gguf"))
        has_config = os.path.isfile(os.path.join(local, "config.json"))
        return local, (ggufs[0] if ggufs and not has_config else None)
    if local.endswith(".gguf"):
        if not os.path.isfile(local):
            raise UsageError(f"cannot load model {name}: no such file")
        return os.path.dirname(os.path.abspath(local)), os.path.basename(local)
    if os.path.exists(local):
        raise UsageError(f"cannot load model {name}: a file, not a model folder or .gguf file")
    head = name.split("/", 1)[0]
    if not _HUB_ID.fullmatch(name) or name.endswith(_WEIGHT_SUFFIXES) or ("/" in name and os.path.isdir(head)):
        raise UsageError(f"cannot load model {name}: no such model folder")
    return name, None


def utf8_folder(folder: str) -> str:
    """`folder` as a path the Rust readers take (safetensors, tokenizers: valid UTF-8 only, which
    otherwise call a good file "corrupt"): itself when it is valid UTF-8; else the folder held open
    and named through `/proc/self/fd` (for this process), or where there is no /proc a link to it
    named in UTF-8 in a temporary folder removed when the process ends."""
    try:
        folder.encode("utf-8")
        return folder
    except UnicodeEncodeError:  # bytes of another encoding, held as surrogates (os.fsdecode)
        pass
    fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    alias = f"/proc/self/fd/{fd}"
    if os.path.isdir(alias):
        st = os.fstat(fd)
        held = _HELD.get(folder)
        if held is not None and os.path.samestat(os.stat(held), st):  # loaded before (a library's Scorers)
            os.close(fd)
            return held
        _HELD[folder] = alias  # open as long as the process may read the model
        return alias
    os.close(fd)
    where = tempfile.mkdtemp(prefix="scorecli-model-")
    atexit.register(shutil.rmtree, where, True)
    link = os.path.join(where, "model")
    os.symlink(os.path.abspath(folder), link)
    return link


_HELD: dict[str, str] = {}  # the folders `utf8_folder` names by descriptor, by their names


def path_text(path: str) -> str:
    """`path` as text that UTF-8 holds (output metadata): a name's bytes that are not UTF-8 written
    as `\\xff` escapes."""
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def is_hub_id(name: str) -> bool:
    """Whether `name` is looked up on the Hub (not a local folder or file; UsageError as `locate`)."""
    path, _ = locate(name)
    return not os.path.isdir(path)


def local_model_path(model: str) -> str | None:
    """The folder or GGUF file a model name loads from on this machine (a Hub id: its cached
    snapshot), or None when there is none to hash (a Hub model not downloaded yet)."""
    path, gguf = locate(model)
    if gguf:
        return os.path.join(path, gguf)
    if os.path.isdir(path):
        return path
    try:
        from huggingface_hub import snapshot_download

        return snapshot_download(path, local_files_only=True)
    except Exception:  # noqa: BLE001 - not cached: the model loads first, then it is hashed
        return None


# the files of a model a run reads: weights, configs (a sentence-transformers folder's modules too),
# tokenizer files (tokenizer.json, vocab.txt, merges.txt, spiece.model, chat templates), a Stanford
# ColBERT checkpoint's artifact.metadata (markers, lengths) and Python files, whose code a
# --trust-remote-code model runs; pickled weights apart: a Hub model's only where a folder has no
# safetensors (repositories often hold both, and ONNX, OpenVINO, TensorFlow and Flax copies, which
# no run reads). `engine.job.MODEL_SUFFIXES` (a local model's files) adds GGUF and checkpoints.
READ_SUFFIXES = (".safetensors", ".json", ".jinja", ".model", ".txt", ".tiktoken", ".metadata", ".py")
PICKLED_SUFFIXES = (".bin", ".pt", ".pth")


def hub_folder(name: str) -> str:
    """The folder in the Hugging Face cache that holds the Hub model `name` as a run reads it, its
    files downloaded where missing: the transformer's, and a sentence-transformers model's modules
    (`modules.json`: pooling, dense layers, normalization, a Router's routes), which transformers'
    own loading never fetches (a sentence-transformers model named by its Hub id was detected
    without them: not as the embedding model it is). Offline (`reach`): the cached snapshot.

    Raises:
        UsageError: the Hub refuses the model (no such repository, gated) or a download fails.
    """
    from huggingface_hub import HfApi, constants, hf_hub_download, snapshot_download

    try:
        if constants.is_offline_mode():
            return snapshot_download(name, local_files_only=True)
        files = HfApi().list_repo_files(name)
        modules = []
        if "modules.json" in files:
            with open(hf_hub_download(name, "modules.json")) as f:
                listed = json.load(f)
            modules = [m["path"] for m in listed if isinstance(m, dict) and isinstance(m.get("path"), str)]
        return snapshot_download(name, allow_patterns=hub_files(files, modules))
    except Exception as exc:  # the Hub's refusals, a connection lost, a modules.json that is not JSON
        lines = str(exc).strip().splitlines()
        raise UsageError(f"cannot load model {name}: {lines[0] if lines else type(exc).__name__}") from exc


def hub_files(files: list[str], modules: list[str]) -> list[str]:
    """Which of a Hub repository's `files` a run reads (`hub_folder`): those of its top folder and of
    the sentence-transformers modules in `modules` (their folders, every level down)."""
    folders: dict[str, list[str]] = {}
    for file in files:
        top, _, _ = file.rpartition("/")
        if top == "" or any(m and (top == m or top.startswith(m + "/")) for m in modules):
            folders.setdefault(top, []).append(file)
    wanted = []
    for names in folders.values():
        safetensors = any(n.endswith(".safetensors") for n in names)
        for n in names:
            if n.endswith(READ_SUFFIXES) or (not safetensors and n.endswith(PICKLED_SUFFIXES)):
                wanted.append(n)
    return sorted(wanted)


def reach(name: str, timeout: float = PROBE_SECONDS) -> str | None:
    """Before a Hub id loads: None when the Hub answers within `timeout` seconds (or offline mode
    is on and the model is cached); a note when it does not answer and the cached copy is used.

    Raises:
        UsageError: the Hub cannot be reached (or HF_HUB_OFFLINE is set) and the model is not
            in the local cache.
    """
    from huggingface_hub import constants

    logging.getLogger("huggingface_hub").setLevel(logging.ERROR)  # no "Retrying in 1s" lines
    if _WENT_OFFLINE.is_set() and constants.HF_HUB_OFFLINE:
        # an earlier model's Hub did not answer (a library caller's process lives on): asked again
        constants.HF_HUB_OFFLINE = False
    _WENT_OFFLINE.clear()
    if constants.is_offline_mode():
        if not _cached(name):
            raise UsageError(
                f"cannot load model {name}: HF_HUB_OFFLINE is set and it is not in the Hugging Face "
                f"cache ({constants.HF_HUB_CACHE}); unset HF_HUB_OFFLINE to download it, or pass a model "
                "folder or a bundled model (--model minilm)"
            )
        return None
    host = urlparse(constants.ENDPOINT).netloc or constants.ENDPOINT
    if _answers(constants.ENDPOINT, timeout):
        return None
    constants.HF_HUB_OFFLINE = True  # the rest of the run reads the cache only (huggingface_hub's offline mode)
    _WENT_OFFLINE.set()
    if _cached(name):
        return f"the Hugging Face Hub ({host}) did not answer within {timeout:g} s: using the cached copy of {name}"
    raise UsageError(
        f"cannot load model {name}: the Hugging Face Hub ({host}) did not answer within {timeout:g} s "
        "(no network?) and the model is not in the local cache; pass a model folder or a bundled model "
        "(--model minilm; scorecli inspect lists them)"
    )


def _cached(name: str) -> bool:
    """Whether the Hugging Face cache holds the model's config (a download that got that far)."""
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(name, "config.json")
    return isinstance(found, str)


def _answers(url: str, timeout: float) -> bool:
    """Whether the Hub at `url` answers a HEAD request within `timeout` seconds (any HTTP status:
    it is there). Asked in a thread so that a name lookup that hangs cannot hold the run."""
    answered: list[bool] = []

    def ask() -> None:
        try:
            from huggingface_hub.utils import get_session

            get_session().head(url, timeout=timeout, follow_redirects=False)
            answered.append(True)
        except Exception:  # noqa: BLE001 - any failure to connect means the Hub is not there
            answered.append(False)

    thread = threading.Thread(target=ask, name="scorecli-hub-probe", daemon=True)
    thread.start()
    thread.join(timeout + 0.5)
    return bool(answered and answered[0])
