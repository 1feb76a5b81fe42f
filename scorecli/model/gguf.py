"""GGUF checkpoints: dequantize once through transformers, cache as safetensors.

transformers loads a GGUF file by dequantizing it (seconds to minutes); the result is
saved under the cache directory, keyed by the file's path, size and mtime, so the next
run loads plain safetensors. Knows nothing about scoring.
"""

from __future__ import annotations

import functools
import hashlib
import os
import struct
from collections.abc import Iterator
from contextlib import contextmanager

from scorecli.errors import UsageError, first_line
from scorecli.model.cache import build_once


def default_cache_dir() -> str:
    """`$XDG_CACHE_HOME/scorecli` where that is an absolute path (the XDG base directory rule,
    which pip, torch and huggingface_hub follow: a relative or empty value is ignored), else
    `~/.cache/scorecli`. `--cache-dir` / `$SCORECLI_CACHE_DIR` override it."""
    xdg = os.path.expanduser(os.environ.get("XDG_CACHE_HOME", ""))
    return os.path.join(xdg if os.path.isabs(xdg) else os.path.join(os.path.expanduser("~"), ".cache"), "scorecli")


def cache_path(folder: str, gguf_file: str, cache_dir: str | None) -> str:
    """Where the dequantized copy of `folder/gguf_file` lives."""
    path = os.path.abspath(os.path.join(folder, gguf_file))
    stat = os.stat(path)
    key = hashlib.sha256(f"{path}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:16]
    stem = os.path.splitext(gguf_file)[0]
    return os.path.join(cache_dir or default_cache_dir(), "gguf", f"{stem}-{key}")


def materialize(folder: str, gguf_file: str, cache_dir: str | None) -> str:
    """Path of a safetensors checkpoint equal to the dequantized GGUF (built on first use)."""
    target = cache_path(folder, gguf_file, cache_dir)
    if os.path.isfile(os.path.join(target, "config.json")):
        return target
    try:
        import gguf  # noqa: F401
    except ImportError:
        raise UsageError("GGUF models need the gguf package: pip install 'scorecli[gguf]'") from None
    build_once(
        target,
        lambda tmp: _dequantize_to(folder, gguf_file, tmp),
        "the dequantized model",
        ready=os.path.join(target, "config.json"),
    )
    return target


@contextmanager
def no_tqdm() -> Iterator[None]:
    """transformers' GGUF conversion draws a tqdm bar on stderr (about 15 carriage-return frames in
    a log): off, since the run's own status line says it is loading."""
    try:
        from transformers import modeling_gguf_pytorch_utils as converter
    except ImportError:
        yield
        return
    bar = getattr(converter, "tqdm", None)
    if bar is None:
        yield
        return
    converter.tqdm = functools.partial(bar, disable=True)
    try:
        yield
    finally:
        converter.tqdm = bar


def _dequantize_to(folder: str, gguf_file: str, out: str) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    where = os.path.join(folder, gguf_file)
    try:
        with no_tqdm():
            config = AutoConfig.from_pretrained(folder, gguf_file=gguf_file)
            loaded, info = AutoModelForCausalLM.from_pretrained(
                folder, gguf_file=gguf_file, dtype=torch.float32, output_loading_info=True
            )
            tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=gguf_file)
    except struct.error as exc:  # its header or tensor table runs past the end of the file
        raise UsageError(
            f"cannot load GGUF model {where}: the file ends inside its header (an incomplete download?)"
        ) from exc
    except (OSError, ValueError, KeyError) as exc:
        if isinstance(exc, ValueError) and str(exc).startswith("cannot reshape array of size"):
            # numpy's, as the reader views a tensor its header says is larger than what the file holds
            raise UsageError(
                f"cannot load GGUF model {where}: the file ends inside its tensor data (an incomplete "
                f"download?): {first_line(exc)}"
            ) from exc
        raise UsageError(f"cannot load GGUF model {where}: {first_line(exc)}") from exc
    missing = sorted(info.get("missing_keys") or ())
    if missing:  # tensors the file lacks (or transformers cannot map) would be random: never cache them
        raise UsageError(
            f"cannot load GGUF model {where}: it has no tensors for {', '.join(missing[:3])}"
            f"{f' and {len(missing) - 3} more' if len(missing) > 3 else ''}, which would be randomly initialised"
        )
    # a GGUF-loaded model cannot save itself: rebuild a plain one from a clean config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.architectures = [type(loaded).__name__]
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(loaded.state_dict())
    plain.save_pretrained(out)
    tokenizer.save_pretrained(out)
