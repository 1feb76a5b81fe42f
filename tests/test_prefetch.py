"""Optional packages imported in the background while a model loads (`runtimes.prefetch`):
`installed` then waits for that import instead of importing again, and says what it would
have said; only a backend that a run on that device and dtype could choose is prefetched."""

from __future__ import annotations

import sys
import threading

import pytest

from scorecli.attention import backends
from scorecli.runtimes import installed, prefetch


@pytest.fixture
def packages(tmp_path, monkeypatch):
    """A folder of stand-in packages on sys.path, and a fresh record of prefetched imports."""
    (tmp_path / "slowpkg.py").write_text(
        "import threading, time\ntime.sleep(0.3)\nTHREAD = threading.current_thread().name\n"
    )
    (tmp_path / "brokenpkg.py").write_text("raise RuntimeError('a CUDA library is missing')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(prefetch, "_STARTED", {})
    names = ("slowpkg", "brokenpkg", "flashinfer")
    before = {name: sys.modules.pop(name) for name in names if name in sys.modules}
    yield tmp_path
    for name in names:  # the stand-ins imported here leave with the test
        sys.modules.pop(name, None)
    sys.modules.update(before)


def test_a_prefetched_import_runs_in_its_own_thread_and_installed_waits_for_it(packages):
    prefetch.prefetch("slowpkg")
    assert "slowpkg" in prefetch._STARTED
    assert installed("slowpkg") is True
    assert sys.modules["slowpkg"].THREAD == "import slowpkg"  # not the caller's thread
    assert threading.current_thread().name != "import slowpkg"


def test_a_missing_package_is_not_installed_and_other_errors_surface(packages):
    prefetch.prefetch("nosuchpkg_scorecli")
    assert installed("nosuchpkg_scorecli") is False
    prefetch.prefetch("brokenpkg")
    with pytest.raises(RuntimeError, match="CUDA library"):
        installed("brokenpkg")


@pytest.mark.parametrize(
    ("requested", "device", "half", "started"),
    [
        ("auto", "cuda", True, True),  # auto runs flashinfer there
        ("flashinfer", "cuda", False, True),  # asked for: it runs in float16
        ("auto", "cuda", False, False),  # auto keeps float32 on sdpa
        ("auto", "cpu", True, False),  # no CUDA: flashinfer never runs
        ("sdpa", "cuda", True, False),
    ],
)
def test_only_a_backend_the_run_could_choose_is_prefetched(packages, requested, device, half, started):
    (packages / "flashinfer").mkdir()
    (packages / "flashinfer" / "__init__.py").write_text("")
    backends.prefetch_for(requested, device, half)
    assert ("flashinfer" in prefetch._STARTED) is started
    if started:
        assert installed("flashinfer") is True


@pytest.mark.parametrize(
    "text, cpu_only",
    [
        ("cuda: Optional[str] = None\nhip: Optional[str] = None\n", True),
        ("cuda: Optional[str] = '12.8'\nhip: Optional[str] = None\n", False),
        ("cuda = None\nhip = '6.2'\n", False),
        ("__version__ = '2.13.0'\n", False),  # says nothing of its build: torch is asked
        ("cuda = None\nhip = (\n", False),  # unreadable
    ],
)
def test_a_cpu_only_torch_is_told_from_its_version_file(tmp_path, monkeypatch, text, cpu_only):
    """`--device auto` on a torch built for the CPU alone needs no `import torch` (a run whose
    pairs are all in the score cache skips it); any other build, or a file it cannot read, is asked."""
    import importlib.machinery
    import importlib.util

    from scorecli import runtimes

    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "version.py").write_text(text)
    spec = importlib.machinery.ModuleSpec("torch", None, origin=str(tmp_path / "torch" / "__init__.py"))
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: spec if name == "torch" else None)
    assert runtimes.cpu_only_torch() is cpu_only
