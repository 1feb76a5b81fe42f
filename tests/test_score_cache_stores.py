"""The score cache where nightly jobs keep it and run (docs/long-jobs.md: Nightly jobs), through the console
script: under a prefix of the local S3 server; with `--engine ray` (workers read the cache and add
their own entries); with `--resume` after a kill."""

from __future__ import annotations

import re
import signal
import time

import pyarrow.parquet as pq
import pytest

from tests import s3_server
from tests.test_cli import Case, _env, jsonl, run_cli, write
from tests.test_objectstores import s3  # noqa: F401 - the module's local S3 server
from tests.test_score_cache import FIRST, SECOND, assert_same, counts, hooked, items_of, meta, score
from tests.test_score_cache_durable import ROWS, start

pytestmark = pytest.mark.e2e  # the console script (or Ray) end to end


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("inputs")
    return {
        "first": write(root / "first.jsonl", jsonl(FIRST)),
        "second": write(root / "second.jsonl", jsonl(SECOND)),
        "rows": write(root / "rows.jsonl", jsonl(ROWS)),
    }


@pytest.fixture(scope="module")
def uncached(tmp_path_factory, inputs, qwen3_seq_cls):
    root = tmp_path_factory.mktemp("uncached")
    for name in ("second", "rows"):
        result = run_cli(Case(score(inputs[name], qwen3_seq_cls, root / f"{name}.parquet")))
        assert result.rc == 0, result.stderr
    return {name: pq.read_table(root / f"{name}.parquet") for name in ("second", "rows")}


def test_cache_in_a_store(s3, inputs, uncached, qwen3_seq_cls, tmp_path):  # noqa: F811
    """Under s3://: partial hits equal an uncached run; then every pair hits with no model."""
    s3_server.client(s3).create_bucket(Bucket="caches")
    env = _env(**s3.env())
    cache = "s3://caches/nightly/"
    for name in ("first", "second"):
        result = run_cli(
            Case(score(inputs[name], qwen3_seq_cls, tmp_path / f"{name}.parquet", "--score-cache", cache), env=env)
        )
        assert result.rc == 0, result.stderr
    assert_same(pq.read_table(tmp_path / "second.parquet"), uncached["second"])
    hits, misses = counts(tmp_path / "second.parquet")
    assert hits == 11 and hits + misses == items_of(SECOND)
    again = hooked(
        "no-model", score(inputs["second"], qwen3_seq_cls, tmp_path / "again.parquet", "--score-cache", cache), env
    )
    assert again.rc == 0, again.stderr
    assert counts(tmp_path / "again.parquet") == (items_of(SECOND), 0)
    assert_same(pq.read_table(tmp_path / "again.parquet"), uncached["second"])
    info = run_cli(Case(["cache", "info", cache], env=env))
    assert info.rc == 0 and "score cache s3://caches/nightly" in info.stdout.decode(), info.stderr
    missing = run_cli(Case(["cache", "info", "s3://caches/nothing/"], env=env))
    assert missing.rc == 2 and len(missing.lines()) == 1, missing.stderr


def _first_night(server, bucket: str, inputs, model: str, tmp_path) -> tuple[dict[str, str], str]:
    """(the environment that reaches the S3 stand-in `server`, a cache `s3://BUCKET/cache/`) after a
    run of the first night's rows filled it."""
    s3_server.client(server).create_bucket(Bucket=bucket)
    env = _env(**server.env())
    cache = f"s3://{bucket}/cache/"
    first = run_cli(Case(score(inputs["first"], model, tmp_path / "first.parquet", "--score-cache", cache), env=env))
    assert first.rc == 0, first.stderr
    return env, cache


def test_a_cache_prefix_these_credentials_may_only_read_serves_its_hits(s3, inputs, uncached, qwen3_seq_cls, tmp_path):  # noqa: F811
    """A team's cache in a bucket whose policy lets this job read, not write (PUT: 403): the run
    scored its first window, then stopped with exit 2 ('cannot write s3://.../segments/...:
    access denied') and wrote no output. As for a local folder it may only read: the hits are
    served, the rest scored, the output written (exit 0), one warning says they were not added."""
    env, cache = _first_night(s3, "team", inputs, qwen3_seq_cls, tmp_path)
    before = sorted(o["Key"] for o in s3_server.client(s3).list_objects_v2(Bucket="team")["Contents"])
    s3.fail(r"^PUT /team/", 403, s3_server.DENIED)
    try:
        result = run_cli(
            Case(score(inputs["second"], qwen3_seq_cls, tmp_path / "second.parquet", "--score-cache", cache), env=env)
        )
    finally:
        s3.clear()
    assert result.rc == 0, result.stderr
    assert_same(pq.read_table(tmp_path / "second.parquet"), uncached["second"])
    hits, misses = counts(tmp_path / "second.parquet")
    assert hits == 11 and misses > 0
    warned = [line for line in result.stderr.splitlines() if line.startswith("warning: score cache")]
    assert len(warned) == 1 and "not writable (access denied)" in warned[0], result.stderr
    after = sorted(o["Key"] for o in s3_server.client(s3).list_objects_v2(Bucket="team")["Contents"])
    assert after == before


def test_prune_where_the_store_refuses_deletes_says_so(s3, inputs, qwen3_seq_cls, tmp_path):  # noqa: F811
    """`cache prune --older-than 0` with credentials whose deletes the bucket denies (DELETE: 403)
    said 'removed 9 entries (1 whole segment), kept 0', exit 0, and removed nothing (the store's
    refusal was taken for a segment another run had merged away): exit 2, one line naming the
    object, and `info` still counts every entry."""
    env, cache = _first_night(s3, "kept", inputs, qwen3_seq_cls, tmp_path)
    s3.fail(r"^(DELETE|POST) /kept/", 403, s3_server.DENIED)
    try:
        pruned = run_cli(Case(["cache", "prune", cache, "--older-than", "0"], env=env))
    finally:
        s3.clear()
    assert pruned.rc == 2 and "access denied" in pruned.stderr and len(pruned.lines()) == 1, (
        pruned.stdout,
        pruned.stderr,
    )
    assert b"removed" not in pruned.stdout
    info = run_cli(Case(["cache", "info", cache], env=env))
    assert f"{items_of(FIRST)} entries in 1 segment" in info.stdout.decode(), info.stdout


def test_cache_with_ray_workers(inputs, uncached, qwen3_seq_cls, tmp_path):
    """Ray workers look pairs up in the cache a local run filled, and add the pairs they score:
    a local run after them hits every pair without a model."""
    cache = tmp_path / "cache"
    result = run_cli(
        Case(score(inputs["first"], qwen3_seq_cls, tmp_path / "first.parquet", "--score-cache", str(cache)))
    )
    assert result.rc == 0, result.stderr
    args = score(inputs["second"], qwen3_seq_cls, tmp_path / "ray.parquet", "--score-cache", str(cache))
    result = run_cli(Case([*args, "--engine", "ray", "--num-workers", "2"]))
    assert result.rc == 0, result.stderr
    assert_same(pq.read_table(tmp_path / "ray.parquet"), uncached["second"])
    hits, misses = counts(tmp_path / "ray.parquet")
    assert hits >= 3 + 3 + 2 + 1 + 1 and hits + misses == items_of(SECOND)  # which worker saw a repeat first varies
    assert f"score cache: {hits:,} hits" in result.stderr
    again = hooked(
        "no-model", score(inputs["second"], qwen3_seq_cls, tmp_path / "again.parquet", "--score-cache", str(cache))
    )
    assert again.rc == 0, again.stderr
    assert counts(tmp_path / "again.parquet") == (items_of(SECOND), 0)


def killed(proc, part, after: float = 0.0) -> None:
    """kill -9 the run `proc` once its part file `part` is in place (and `after` seconds more)."""
    try:
        deadline = time.monotonic() + 120
        while not part.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(after)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()


def test_cache_with_resume(inputs, uncached, qwen3_seq_cls, tmp_path):
    """A cached job killed and resumed: the output an uninterrupted run writes."""
    cache, out = tmp_path / "cache", tmp_path / "out.parquet"
    args = score(inputs["rows"], qwen3_seq_cls, out, "--window-rows", "1", "--score-cache", str(cache))
    killed(start("slow:1.5", args), tmp_path / "out.parquet.partial" / "part-00000.parquet", 0.5)
    assert not out.exists()
    result = run_cli(Case([*args, "--resume"]))
    assert result.rc == 0, result.stderr
    assert "resumed after" in result.stderr
    assert_same(pq.read_table(out), uncached["rows"])
    hits, misses = counts(out)  # the whole output's pairs, kept windows included (not the resumed ones alone)
    assert hits + misses == sum(len(s) for s in pq.read_table(out)["score"].to_pylist()), (hits, misses)


def test_ray_resumes_a_cached_job_with_the_whole_outputs_counts(inputs, uncached, qwen3_seq_cls, tmp_path):
    """A cached job resumed with --engine ray counted the resumed rows' pairs alone (its metadata said
    fewer hits and misses than the output holds items, where the local engine counts them all); the
    parts Ray writes now hold the job's counts so far, as the local engine's do."""
    cache, out = tmp_path / "cache", tmp_path / "out.parquet"
    args = score(inputs["rows"], qwen3_seq_cls, out, "--window-rows", "1", "--score-cache", str(cache))
    killed(start("slow:1.5", args), tmp_path / "out.parquet.partial" / "part-00000.parquet", 0.5)
    result = run_cli(Case([*args, "--resume", "--engine", "ray", "--num-workers", "1"]))
    assert result.rc == 0, result.stderr
    kept = re.search(r"resumed after (\d+) rows?;", result.stderr)
    assert kept is not None, result.stderr
    kept = int(kept.group(1))
    assert_same(pq.read_table(out), uncached["rows"])
    hits, misses = counts(out)
    assert hits + misses == items_of(ROWS) and kept < len(ROWS), (hits, misses, kept)
    assert (
        f"score cache: {hits:,} hits, {misses:,} misses (the output's, its {kept} kept row{'s' * (kept != 1)} included)"
        in result.stderr
    )


def test_resume_after_windows_that_all_came_from_the_cache(qwen3_seq_cls, tmp_path):
    """Kept windows whose pairs all came from the cache carry the metadata of the run that filled
    it (here with --attention eager, which is no part of the key): --resume of the very same
    command goes on (it was refused: "pass --attention eager")."""
    rows = [{"id": i, "query": f"query number {i}", "items": [f"item {i}", f"another item {i}"]} for i in range(8)]
    first, every = write(tmp_path / "first.jsonl", jsonl(rows[:4])), write(tmp_path / "all.jsonl", jsonl(rows))
    cache, out = tmp_path / "cache", tmp_path / "out.parquet"
    filled = run_cli(
        Case(score(first, qwen3_seq_cls, tmp_path / "f.parquet", "--score-cache", str(cache), "--attention", "eager"))
    )
    assert filled.rc == 0, filled.stderr
    args = score(every, qwen3_seq_cls, out, "--window-rows", "1", "--score-cache", str(cache), "--audit", "16")
    # the four hits are written at once; the first miss sleeps
    killed(start("slow:3", args), tmp_path / "out.parquet.partial" / "part-00003.parquet")
    assert not out.exists()
    result = run_cli(Case([*args, "--resume"]))
    assert result.rc == 0, result.stderr
    assert "resumed after" in result.stderr and pq.read_table(out).num_rows == len(rows)
    assert counts(out) == (4 * 2, 4 * 2)
    audited = meta(out)  # every pair of the job, the kept windows' too (it drew from the resumed ones alone)
    assert (audited["audit_pairs"], float(audited["audit_max_score_diff"]) <= 1e-5) == ("16", True), audited
    # the summary said "16 pairs (0 of them reused)" of a job whose kept half all came from the cache:
    # a kept part does not say which of its pairs did, so the line says which pairs are the kept rows'
    kept = int(re.search(r"resumed after (\d+) rows?;", result.stderr).group(1))
    assert f"(the output's, its {kept} kept rows included)" in result.stderr, result.stderr
    said = f"16 pairs ({2 * kept} of them are from the kept rows, {2 * (4 - kept)} of the rest reused)"
    assert said in result.stderr, result.stderr  # the kill may come before the fourth part is journaled


def test_a_segment_merged_away_after_it_was_listed_is_passed_over(s3, monkeypatch):  # noqa: F811
    """Another run's merge deletes a segment under s3:// between this run's check that it is there
    and its read (the same run opening the cache, or `cache info`): the read stopped the run,
    exit 2 'cannot read s3://...: no such object', where a local folder's segment passes over as
    gone (its pairs are in the merged one)."""
    import numpy as np

    from scorecli.cache.segments import Entries
    from scorecli.cache.store import CacheStore
    from scorecli.io.stores import Store

    s3_server.client(s3).create_bucket(Bucket="merged")
    store, profile = CacheStore("s3://merged/cache/", create=True), "ab" * 16
    entries = Entries.of(np.array([[1, 2], [3, 4]], dtype=np.uint64), np.ones((2, 1), np.float32), None)
    info = Store.info

    def then_merged_away(self, path):  # the segment is there when asked, then another run deletes it
        found = info(self, path)
        if path.endswith(".arrow"):
            self.delete(path)
        return found

    name = store.write(profile, entries, {"identity": "x", "name": "m"})
    assert store.read(profile, name) is not None
    monkeypatch.setattr(Store, "info", then_merged_away)
    assert store.read(profile, name) is None
    monkeypatch.undo()
    store.write(profile, entries, {"identity": "x", "name": "m"})
    monkeypatch.setattr(Store, "info", then_merged_away)
    assert store.infos(profile, verify=True) == []
