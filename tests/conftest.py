"""Session-scoped fixtures: tiny offline checkpoints built by ``tests.builders.models``.

Each fixture builds once per test session into a ``tmp_path_factory`` folder and returns
that folder's path as ``str`` (load it with ``from_pretrained``).
"""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

from tests.builders import models


def pytest_addoption(parser):
    parser.addoption(
        "--sample",
        type=int,
        default=0,
        metavar="N",
        help="run at most N parametrizations of each test function, spread over its parameters "
        "(`make test-fast`; 0: all of them, as `make test` and CI run)",
    )
    parser.addoption(
        "--transformers",
        default="",
        metavar="VERSION",
        help="the transformers these tests must run under (`make test-old-transformers`, which lays "
        "another one over the virtualenv's): the run stops if another is imported",
    )


def pytest_configure(config):
    # What runs without --cache-dir keeps (ONNX exports, `auto`'s verdicts, remembered records, the
    # judge's dequantized copy) goes to a folder of this session, in this process and in the CLI
    # processes the tests start, as on a clean CI machine: not into the developer's ~/.cache/scorecli.
    config._scorecli_cache_home = os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="scorecli-tests-cache-")
    config.addinivalue_line("markers", "slow: loads the real SmolLM2 model (GGUF); deselect with -m 'not slow'")
    wanted = config.getoption("--transformers")
    if wanted:
        import transformers

        if transformers.__version__ != wanted:
            raise pytest.UsageError(f"--transformers {wanted}: transformers {transformers.__version__} is imported")


def pytest_unconfigure(config):
    folder = getattr(config, "_scorecli_cache_home", None)
    if folder:
        shutil.rmtree(folder, ignore_errors=True)


def pytest_collection_modifyitems(config, items):
    """`--sample N`: every test function still runs, on at most N of its parameter sets, the first,
    the last and evenly spaced ones between (a fast loop that reaches every test; CI runs all)."""
    n = config.getoption("--sample")
    if n <= 0:
        return
    groups: dict[tuple[str, str], list] = {}
    for item in items:
        groups.setdefault((item.nodeid.split("::")[0], getattr(item, "originalname", item.name)), []).append(item)
    keep = set()
    for group in groups.values():
        if len(group) <= n:
            keep.update(id(i) for i in group)
        else:
            picks = {round(k * (len(group) - 1) / (n - 1)) for k in range(n)} if n > 1 else {0}
            keep.update(id(group[k]) for k in picks)
    deselected = [i for i in items if id(i) not in keep]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [i for i in items if id(i) in keep]


@pytest.fixture(scope="session")
def bpe_tokenizer(tmp_path_factory) -> str:
    """Folder holding the byte-level BPE tokenizer without BOS (Qwen style)."""
    out = tmp_path_factory.mktemp("bpe_tokenizer")
    models.build_bpe_tokenizer(add_bos=False).save_pretrained(out)
    return str(out)


@pytest.fixture(scope="session")
def qwen3_seq_cls(tmp_path_factory) -> str:
    return models.build_qwen3_seq_cls(tmp_path_factory.mktemp("qwen3_seq_cls"), num_labels=1)


@pytest.fixture(scope="session")
def qwen3_seq_cls_3labels(tmp_path_factory) -> str:
    return models.build_qwen3_seq_cls(tmp_path_factory.mktemp("qwen3_seq_cls_3labels"), num_labels=3)


@pytest.fixture(scope="session")
def qwen3_causal_lm(tmp_path_factory) -> str:
    return models.build_qwen3_causal_lm(tmp_path_factory.mktemp("qwen3_causal_lm"))


@pytest.fixture(scope="session")
def llama_reward(tmp_path_factory) -> str:
    return models.build_llama_reward(tmp_path_factory.mktemp("llama_reward"))


@pytest.fixture(scope="session")
def gemma2_seq_cls(tmp_path_factory) -> str:
    return models.build_gemma2_seq_cls(tmp_path_factory.mktemp("gemma2_seq_cls"))


@pytest.fixture(scope="session")
def gpt_oss_seq_cls(tmp_path_factory) -> str:
    return models.build_gpt_oss_seq_cls(tmp_path_factory.mktemp("gpt_oss_seq_cls"))


@pytest.fixture(scope="session")
def bert_cross_encoder(tmp_path_factory) -> str:
    return models.build_bert_cross_encoder(tmp_path_factory.mktemp("bert_cross_encoder"))


@pytest.fixture(scope="session", params=["roberta", "xlm-roberta", "electra", "distilbert"])
def encoder_family(request, tmp_path_factory) -> tuple[str, str]:
    """(arch, folder): tiny cross-encoders of the other encoder families."""
    arch = request.param
    return arch, models.build_bert_cross_encoder(tmp_path_factory.mktemp(f"{arch}_cross_encoder"), arch=arch)


@pytest.fixture(scope="session")
def minilm_cross_encoder(tmp_path_factory) -> str:
    return models.build_minilm_cross_encoder(tmp_path_factory.mktemp("minilm_cross_encoder"))
