"""The real `scorecli`, with a test-only hook, for the score cache and audit tests
(tests/test_score_cache.py, tests/test_audit.py):

    python -m tests.cache_cli HOOK score ...

HOOK is one of:
- `no-model`: building a Scorer (loading a model) fails the run: a run whose pairs all hit in
  the cache must not need one;
- `perturb:X`: every other item's scores a run computes are off by X (the self-check's probe and the audit's
  reference, the model's own forward, are not): a deliberately broken path for `--audit`;
- `slow:S`: every batch of the run sleeps S seconds first (to kill a run in the middle);
- `not-imported:A,B`: the run fails (exit 3) if it imported package A or B: a run whose pairs all
  hit, on a CPU-only torch, must not pay torch's and transformers' import, and no local run
  pandas' (pyarrow would import it);
- `full-after:N`: the cache's segment files after the first N fail to be written, as on a full
  disk (ENOSPC);
- `read-only:DIR`: every file written under DIR fails as in a folder the run may not write (EACCES:
  a team's cache shared read-only, for a test run as root, where chmod does not bite);
- `rendered`: chat templates render with a system turn first, as another transformers (or jinja)
  may render the same template: the same flags and model resolve to another `yes-no-chat` template;
  `rendered:upgraded`: and the libraries' versions are others (that transformers is installed);
- `replaced:NEW`: once the score cache has hashed the model's folder, its files are overwritten
  by those of the folder NEW, before the model loads (as a Hub id's load fetches a newer commit,
  or a deploy replaces a folder while a run's first windows are served from the cache);
- `probe:P`: the bytecode check (`scorecli.bytecode`) looks at package P instead of torch;
- `none`: nothing changed.
"""

from __future__ import annotations

import atexit
import errno
import os
import sys
import time

from scorecli.cli import main


def _not_imported(packages: list[str]) -> None:
    loaded = [p for p in packages if p in sys.modules]
    if loaded:
        sys.stderr.write(f"imported {' and '.join(loaded)}\n")
        sys.stderr.flush()
        os._exit(3)


def patch(hook: str) -> None:
    name, _, arg = hook.partition(":")
    if name == "not-imported":
        atexit.register(_not_imported, arg.split(","))  # a successful run's exit handlers run (`process.finish`)
        return
    if name == "probe":
        from scorecli import bytecode

        bytecode.PROBE = arg
        return
    if name == "full-after":
        _full_after(int(arg))
        return
    if name == "read-only":
        _read_only(os.path.abspath(arg))
        return
    if name == "replaced":
        _replaced(arg)
        return
    if name == "rendered":
        from transformers import PreTrainedTokenizerBase

        render = PreTrainedTokenizerBase.apply_chat_template

        def with_system(self, conversation, *args, **kwargs):
            return render(self, [{"role": "system", "content": "Judge."}, *conversation], *args, **kwargs)

        PreTrainedTokenizerBase.apply_chat_template = with_system  # type: ignore[method-assign]
        if arg == "upgraded":
            from scorecli.cache import identity

            identity.library_versions = lambda: {"transformers": "99.0"}
        return
    from scorecli import scorer  # torch

    if name == "no-model":

        def refuse(self, *args, **kwargs):
            raise RuntimeError("the model was loaded")

        scorer.Scorer.__init__ = refuse  # type: ignore[method-assign]
    elif name == "perturb":
        values = scorer.Scorer.values

        def perturbed(self, prepared, on_batch=None):
            out = values(self, prepared, on_batch)
            if hasattr(self, "self_check_note"):  # a window of the run, not the self-check's probe
                out[::2, : len(self.spec.label_names)] += float(arg)  # every other item: orders change
            return out

        scorer.Scorer.values = perturbed  # type: ignore[method-assign]
    elif name == "slow":
        score_batch = scorer.Scorer._score_batch

        def slow(self, batch, forward=None):
            if hasattr(self, "self_check_note"):
                time.sleep(float(arg))
            return score_batch(self, batch, forward)

        scorer.Scorer._score_batch = slow  # type: ignore[method-assign]
    elif name != "none":
        raise SystemExit(f"unknown hook {hook}")


def _full_after(n: int) -> None:
    """Segment files after the first `n` fail as on a full disk (the temporary file made, then
    its write failing, as `io.folders` meets it)."""
    from scorecli.io import folders

    write, written = folders.LocalFolder.write, [0]

    def full(self, name, fill):
        if os.path.basename(os.path.dirname(self.where)) == "segments":
            written[0] += 1
            if written[0] > n:

                def fail(f):
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

                return write(self, name, fail)
        return write(self, name, fill)

    folders.LocalFolder.write = full  # type: ignore[method-assign]


def _replaced(new: str) -> None:
    """The model folder's files overwritten by `new`'s right after the score cache first hashed it."""
    import shutil

    from scorecli.cache import reuse

    identify = reuse.model_identity

    def then_replaced(model, memo=None):
        value = identify(model, memo)
        reuse.model_identity = identify
        shutil.copytree(new, model, dirs_exist_ok=True)
        return value

    reuse.model_identity = then_replaced


def _read_only(root: str) -> None:
    """Files written (and folders made) under `root` fail with EACCES, as `io.folders` meets a
    folder without write permission."""
    from scorecli.io import folders

    write, make = folders.LocalFolder.write, folders.LocalFolder.make

    def under(folder) -> bool:
        return os.path.abspath(folder.where).startswith(root)

    def denied(self, *args):
        if under(self):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))
        return write(self, *args)

    def made(self):
        if under(self) and not os.path.isdir(self.where):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))
        return make(self)

    folders.LocalFolder.write = denied  # type: ignore[method-assign]
    folders.LocalFolder.make = made  # type: ignore[method-assign]


if __name__ == "__main__":
    patch(sys.argv[1])
    sys.argv = ["scorecli", *sys.argv[2:]]
    main()
