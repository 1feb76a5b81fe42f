"""The score cache's pieces in process (the console tests are tests/test_score_cache*.py): lookups,
high words that collide included, in small and bucketed segments; segments written and read back,
and refused when cut short or changed; a window's plan and merge."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from scorecli.cache.index import Index
from scorecli.cache.keys import keys_of
from scorecli.cache.reuse import Reusing
from scorecli.cache.segments import Damaged, Entries, read_entries, to_ipc
from scorecli.cache.window import plan
from scorecli.config import ScoreConfig
from scorecli.core.rows import Row
from scorecli.io.readers import RawRow


def entries(n: int, seed: int = 0, collide: int = 0) -> Entries:
    """n random entries; the first `collide` share one high word (keys differing in the low word)."""
    rng = np.random.default_rng(seed)
    keys = rng.integers(0, 2**63, size=(n, 2), dtype=np.uint64)
    keys[:collide, 0] = keys[0, 0]
    return Entries.of(keys, rng.standard_normal((n, 2)).astype(np.float32), None)


@pytest.mark.parametrize("n", [50, 20_000])  # searched directly; through the bucket table
def test_lookup_finds_exactly_the_keys_it_holds(n):
    e = entries(n, collide=7)
    index = Index(2, False)
    index.open(e.sorted_unique())
    rng = np.random.default_rng(1)
    present = rng.choice(n, size=min(n, 500), replace=False)
    present[:7] = np.arange(7)  # every key of the shared high word
    absent = rng.integers(0, 2**63, size=(100, 2), dtype=np.uint64)
    absent[:5, 0] = e.hi[0]  # a shared high word with another low word: absent still
    q = np.concatenate([np.stack([e.hi[present], e.lo[present]], 1), absent])
    found, scores, _ = index.lookup(q)
    assert found[: len(present)].all() and not found[len(present) :].any()
    np.testing.assert_array_equal(scores[: len(present)], e.scores[present])


def test_own_entries_are_found_and_the_newest_wins():
    index = Index(2, False, limit=10_000)
    old = entries(100)
    index.open(old.sorted_unique())
    newer = Entries(old.hi[:10], old.lo[:10], old.scores[:10] + 1)
    index.add(newer)
    found, scores, _ = index.lookup(np.stack([old.hi[:20], old.lo[:20]], 1))
    assert found.all()
    np.testing.assert_array_equal(scores[:10], old.scores[:10] + 1)
    np.testing.assert_array_equal(scores[10:], old.scores[10:20])
    for seed in range(2, 12):  # runs merge as they pile up; the limit drops the oldest
        index.add(entries(2000, seed))
    assert index.size <= 10_000 + 100


def test_a_window_prepared_while_entries_are_added_looks_again(monkeypatch):
    """The next window is looked up in another thread while this one adds its entries
    (`engine.local`): an add counts in `version` only once its entries are searchable, and a
    window keeps the version it had before its lookup, so that a pair added meanwhile is looked up
    again (`Reusing._again`), never scored twice. A race here scored a repeat once more now and
    then (an 8,000-row job: 101,363 tokens in one run, 101,357 in the next)."""
    index = Index(1, False)
    visible = []

    class Runs(list):
        def append(self, run):
            visible.append(index.version)  # the version a lookup reads as the entries appear
            super().append(run)

    index.runs = Runs()
    index.add(entries(10))
    assert visible == [0] and index.version == 1

    scorer = SimpleNamespace(
        spec=SimpleNamespace(label_names=["score"], positive_index=0),
        prepare_parsed=lambda rows, which, errors, id_type: SimpleNamespace(errors=[None] * len(rows)),
    )
    reuse = Reusing(ScoreConfig(model="m"), lambda: scorer)
    lookup = reuse.index.lookup

    def meanwhile(keys):  # this window's pairs are added by the window before, during the lookup
        found = lookup(keys)
        reuse.index.add(Entries.of(keys, np.zeros((len(keys), 1), np.float32), None))
        return found

    monkeypatch.setattr(reuse.index, "lookup", meanwhile)
    window = reuse.prepare([RawRow({"query": "q", "items": ["a", "b"]}, "row 1")])
    assert window.plan.misses == 2 and window.version != reuse.index.version  # `run` looks again


def test_segment_round_trip_and_damage(tmp_path):
    e = entries(1000).sorted_unique()
    data = to_ipc(e, "p" * 32, {"identity": "abc", "name": "m"})
    path = tmp_path / "s.arrow"
    path.write_bytes(data)
    for source in (data, str(path)):
        back, meta = read_entries(source, "p" * 32)
        np.testing.assert_array_equal(back.hi, e.hi)
        np.testing.assert_array_equal(back.scores, e.scores)
        assert meta["model_identity"] == "abc" and meta["rows"] == "1000"
    with pytest.raises(Damaged, match="other settings"):
        read_entries(data, "q" * 32)
    with pytest.raises(Damaged, match="cannot be read"):
        read_entries(data[: len(data) // 2], "p" * 32)
    flipped = bytearray(data)
    at = flipped.find(e.scores[5].tobytes())
    flipped[at + 3] ^= 0x80
    with pytest.raises(Damaged, match="checksum"):
        read_entries(bytes(flipped), "p" * 32)


def test_plan_and_merge():
    rows = [
        Row("q1", ["a", "b", "a", "c"], None, 1),
        None,  # failed validation
        Row("q1", ["b", "d"], None, 2),
        Row("q2", ["a"], None, 3),
    ]
    keys, offsets = keys_of(bytes(16), rows)
    assert offsets.tolist() == [0, 4, 4, 6, 7]
    found = np.zeros(7, dtype=bool)
    found[2] = True  # the row's second "a" was in the cache (a hit comes before any repeat)
    p = plan(rows, keys, offsets, found)
    # "a", "b", "c", "d", and q2's "a" (another query) scored once each; q1's later "b" repeats
    assert p.scored.tolist() == [0, 1, 3, 5, 6] and p.source.tolist() == [-1, -1, -1, -1, 1, -1, -1]
    assert [r.items if r else None for r in p.rows] == [["a", "b", "c"], None, ["d"], ["a"]]
    hits = np.zeros((7, 2), np.float32)
    hits[2] = [9, 9]
    scored = np.arange(10, dtype=np.float32).reshape(5, 2)
    merged = p.merge(hits, scored, 2)
    assert merged.tolist() == [[0, 1], [2, 3], [9, 9], [4, 5], [2, 3], [6, 7], [8, 9]]


def test_a_cache_another_run_is_making_is_not_foreign(tmp_path):
    """Two runs make one new cache at once: the second lists the folder while the first's marker
    is still a temporary file. That folder is not "other files" (refused), and each writes the
    marker under a temporary name of its own (one renaming it cannot take the other's away)."""
    from scorecli.cache.store import MARKER, CacheStore

    location = tmp_path / "cache"
    location.mkdir()
    other = location / f".{MARKER}.999999.tmp"
    other.write_bytes(b'{"format": ')  # the other run, half-way through writing it
    CacheStore(str(location), create=True)
    assert sorted(p.name for p in location.iterdir()) == [other.name, MARKER]
    CacheStore(str(location), create=False)  # the marker it wrote reads back


@pytest.mark.parametrize(
    "text",
    [
        "{}",
        "[1]",
        '"x"',
        '{"settings": "zz", "labels": 1, "positive_index": 0}',
        '{"settings": "' + "a" * 32 + '"}',
        '{"settings": "' + "a" * 32 + '", "labels": 1, "positive_index": 1}',
    ],
)
def test_a_request_or_model_record_that_is_not_one_reads_as_none(tmp_path, text):
    """A record under requests/ or models/ that reads as JSON but is not what a run writes (a
    hand edit, another build's): the run stopped at once with 'error: KeyError: 'settings'' (or a
    ValueError, a TypeError) on every night until someone found the file; it reads as none, so
    the model loads and records it again (SPEC 16: a corrupt piece is passed over)."""
    from scorecli.cache.store import CacheStore

    store = CacheStore(str(tmp_path / "cache"), create=True)
    good = {"settings": "ab" * 16, "labels": 3, "positive_index": 2, "metadata": {}, "identity": "cd" * 16}
    store.save_request("r" * 32, good)
    assert store.request("r" * 32) == good
    (tmp_path / "cache" / "requests" / ("r" * 32 + ".json")).write_text(text)
    assert store.request("r" * 32) is None
    store.memo.put("k", "cd" * 16)
    assert store.memo.get("k") == "cd" * 16
    (tmp_path / "cache" / "models" / "k.json").write_text('{"identity": ' + (text if text != "{}" else "5") + "}")
    assert store.memo.get("k") is None


def test_a_colbert_checkpoints_settings_are_part_of_the_model(tmp_path):
    """A Stanford ColBERT checkpoint keeps its markers and lengths in `artifact.metadata`: edited
    in place (a shorter query length), the model is another one, for the cache and for a job."""
    from scorecli.cache.identity import model_identity
    from scorecli.config import ScoreConfig
    from scorecli.engine.job import fingerprint

    model = tmp_path / "colbert"
    model.mkdir()
    (model / "config.json").write_text('{"architectures": ["HF_ColBERT"]}')
    (model / "model.safetensors").write_bytes(b"weights")
    (model / "artifact.metadata").write_text('{"query_maxlen": 32}')
    cfg = ScoreConfig(model=str(model))
    before, job = model_identity(str(model)), fingerprint(cfg, [], "parquet")
    (model / "artifact.metadata").write_text('{"query_maxlen": 16}')
    assert model_identity(str(model)) != before
    assert fingerprint(cfg, [], "parquet")["model file"] != job["model file"]


def test_a_template_that_strips_the_item_end_is_other_settings():
    """Scores of a chat template that trims its messages (the item's end stripped) are not those a
    template of the same texts gives without: the cache keeps them apart."""
    from dataclasses import replace

    import torch

    from scorecli.cache.identity import settings_of
    from scorecli.core.templates import Template

    template = Template("yes-no-chat", "P {query}:", " {item}<|im_end|>\n")
    spec = SimpleNamespace(kind="causal-lm", label_ids=(1, 2), label_names=("yes", "no"), activation="softmax")
    spec = SimpleNamespace(**vars(spec), similarity=None, max_seq_len=512, positive_index=0, logit_score=False)
    scorer = SimpleNamespace(
        config=ScoreConfig(model="m"),
        spec=spec,
        template=template,
        chunking=None,
        loaded=SimpleNamespace(dtype=torch.float32),
    )
    scorer.runtime = "torch"
    stripping = SimpleNamespace(**{**vars(scorer), "template": replace(template, strips_item_end=True)})
    assert settings_of(scorer, "m") != settings_of(stripping, "m")


@pytest.mark.parametrize("age", ["", " ", "-1d", "30x"])
def test_prune_refuses_an_empty_or_bad_age(tmp_path, age):
    """`cache prune --older-than "$AGE"` with AGE unset (`""`) pruned nothing by age and said
    "removed 0 entries", exit 0, as if nothing were that old: an age that is none is a usage
    error (exit 2), as a bad one is, before the cache is touched."""
    from scorecli.cache.admin import prune
    from scorecli.cache.store import CacheStore
    from scorecli.errors import UsageError

    CacheStore(str(tmp_path / "cache"), create=True)
    with pytest.raises(UsageError, match="--older-than"):
        prune(str(tmp_path / "cache"), None, age)


@pytest.mark.parametrize("location", ["", "  "])
def test_an_empty_score_cache_location_is_refused(location):
    """`--score-cache "$CACHE"` with CACHE unset ran the job with no cache at all, exit 0, every
    night scoring every pair and keeping none, with nothing said: an empty location is a usage
    error (exit 2), as an empty --out is."""
    from scorecli.errors import UsageError

    with pytest.raises(UsageError, match="--score-cache: empty location"):
        ScoreConfig(model="m", score_cache=location)
