"""A score cache survives what nightly jobs meet (docs/long-jobs.md: Nightly jobs), through the console script:
a run killed with SIGKILL keeps its finished windows' entries and leaves the cache readable; two
runs writing one cache at once lose nothing; a truncated segment is passed over with one warning,
never read as a score; `cache info` and `cache prune` say and remove what they should."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.test_cli import Case, _env, jsonl, run_cli, write
from tests.test_score_cache import FIRST, ROOT, SECOND, assert_same, counts, hooked, items_of, score

pytestmark = pytest.mark.e2e  # the console script (or Ray) end to end

ROWS = [{"id": i, "query": f"query {i % 3}", "items": [f"item {i} {j}" for j in range(3)]} for i in range(8)]


def segments(cache: Path) -> list[Path]:
    return sorted(p for p in (cache / "segments").glob("*/*.arrow"))


def start(hook: str, args: list[str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.cache_cli", hook, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
        cwd=ROOT,
    )


def test_kill_keeps_finished_windows(tmp_path, qwen3_seq_cls):
    """SIGKILL after some windows: their entries are in the cache, which reads; the next run
    hits them and writes what an uncached run writes."""
    inp = write(tmp_path / "rows.jsonl", jsonl(ROWS))
    cache = tmp_path / "cache"
    proc = start(
        "slow:1.5",
        score(inp, qwen3_seq_cls, tmp_path / "killed.parquet", "--window-rows", "1", "--score-cache", str(cache)),
    )
    try:
        deadline = time.monotonic() + 120
        while len(segments(cache)) < 2 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(segments(cache)) >= 2, proc.stderr.read().decode() if proc.poll() is not None else "too slow"
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    kept = len(segments(cache))
    info = run_cli(Case(["cache", "info", str(cache)]))
    assert info.rc == 0 and f"{3 * kept:,} entries in {kept} segments" in info.stdout.decode(), info.stdout
    result = run_cli(Case(score(inp, qwen3_seq_cls, tmp_path / "whole.parquet", "--score-cache", str(cache))))
    assert result.rc == 0, result.stderr
    hits, misses = counts(tmp_path / "whole.parquet")
    assert hits >= 3 * kept and hits + misses == items_of(ROWS)
    uncached = run_cli(Case(score(inp, qwen3_seq_cls, tmp_path / "uncached.parquet")))
    assert uncached.rc == 0, uncached.stderr
    assert_same(pq.read_table(tmp_path / "whole.parquet"), pq.read_table(tmp_path / "uncached.parquet"))
    assert len(segments(cache)) <= kept + 1  # the finished run's windows merged into one segment


def test_concurrent_writers_lose_nothing(tmp_path, qwen3_seq_cls):
    """Two runs write one cache at once; a run of both jobs' rows then hits every pair (and loads
    no model)."""
    first, second = write(tmp_path / "first.jsonl", jsonl(FIRST)), write(tmp_path / "second.jsonl", jsonl(SECOND))
    cache = tmp_path / "cache"
    procs = [
        start(
            "none",
            score(inp, qwen3_seq_cls, tmp_path / f"{k}.parquet", "--window-rows", "1", "--score-cache", str(cache)),
        )
        for k, inp in enumerate((first, second))
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err.decode()
    both = write(tmp_path / "both.jsonl", jsonl(FIRST + SECOND))
    result = hooked("no-model", score(both, qwen3_seq_cls, tmp_path / "both.parquet", "--score-cache", str(cache)))
    assert result.rc == 0, result.stderr
    assert counts(tmp_path / "both.parquet") == (items_of(FIRST + SECOND), 0)


def test_a_full_cache_disk_is_named_and_the_job_resumes(tmp_path, qwen3_seq_cls):
    """The cache's disk fills up mid-run: the error names the cache, not the output (whose disk a
    user would clear in vain), exit 1, the finished windows kept; with room, `--resume` ends the job."""
    inp = write(tmp_path / "rows.jsonl", jsonl(ROWS))
    cache, out = tmp_path / "cache", tmp_path / "out.parquet"
    args = score(inp, qwen3_seq_cls, out, "--window-rows", "1", "--score-cache", str(cache))
    result = hooked("full-after:2", args)
    assert result.rc == 1, result.stderr
    line = result.lines()[-1]
    assert line.startswith(f"error: score cache {cache}: cannot write to it (No space left on device)"), line
    assert "2 rows kept" in line and "--resume" in line and not out.exists(), line
    assert not list((cache / "segments").glob("*/.*"))  # no temporary file left
    result = run_cli(Case([*args, "--resume"]))
    assert result.rc == 0, result.stderr
    assert_same(pq.read_table(out), pq.read_table(run_uncached(tmp_path, inp, qwen3_seq_cls)))


def test_a_full_cache_disk_at_the_merge_is_a_warning(tmp_path, qwen3_seq_cls):
    """Every window scored, its entries durable, the output's parts kept: only merging the run's
    segments into one fails (a full disk). Housekeeping: one warning, and the run succeeds."""
    inp = write(tmp_path / "rows.jsonl", jsonl(ROWS))
    cache, out = tmp_path / "cache", tmp_path / "out.parquet"
    result = hooked("full-after:8", score(inp, qwen3_seq_cls, out, "--window-rows", "1", "--score-cache", str(cache)))
    assert result.rc == 0, result.stderr
    warnings = [line for line in result.lines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "were not merged (No space left on device)" in warnings[0], result.stderr
    assert len(segments(cache)) == len(ROWS) and counts(out) == (0, items_of(ROWS))
    assert_same(pq.read_table(out), pq.read_table(run_uncached(tmp_path, inp, qwen3_seq_cls)))


@pytest.mark.parametrize("how", ["denied", "chmod"])
def test_a_read_only_cache_serves_hits_and_scores_the_rest(tmp_path, qwen3_seq_cls, how):
    """A team's cache shared read-only: its hits are served, the new pairs scored, the output
    written whole (exit 0), and one warning says the new scores were not added; the cache is as it
    was. `denied`: writes under the cache fail with EACCES (a hook: chmod does not bite as root)."""
    if how == "chmod" and os.geteuid() == 0:
        pytest.skip("root writes into a folder whatever its mode")
    first, second = write(tmp_path / "first.jsonl", jsonl(FIRST)), write(tmp_path / "second.jsonl", jsonl(SECOND))
    cache, out = tmp_path / "cache", tmp_path / "out.parquet"
    assert run_cli(Case(score(first, qwen3_seq_cls, tmp_path / "a.parquet", "--score-cache", str(cache)))).rc == 0
    before = {p: p.read_bytes() for p in cache.rglob("*") if p.is_file()}
    args = score(second, qwen3_seq_cls, out, "--score-cache", str(cache))
    if how == "chmod":
        for path in [cache, *cache.rglob("*")]:
            path.chmod(0o555 if path.is_dir() else 0o444)
        try:
            result = run_cli(Case(args))
        finally:
            for path in [cache, *cache.rglob("*")]:
                path.chmod(0o755 if path.is_dir() else 0o644)
    else:
        result = hooked(f"read-only:{cache}", args)
    assert result.rc == 0, result.stderr
    warnings = [line for line in result.lines() if line.startswith("warning:")]
    assert len(warnings) == 1, result.stderr
    assert f"score cache {cache}: not writable (Permission denied)" in warnings[0], warnings
    hits, misses = counts(out)
    assert hits + misses == items_of(SECOND) and hits > 0 and misses > 0
    assert "were not added to it" in warnings[0] and f"score cache: {hits:,} hits, {misses:,} misses" in result.stderr
    assert_same(pq.read_table(out), pq.read_table(run_uncached(tmp_path, second, qwen3_seq_cls)))
    assert {p: p.read_bytes() for p in cache.rglob("*") if p.is_file()} == before


def run_uncached(tmp_path: Path, inp: str, model: str) -> Path:
    out = tmp_path / "uncached.parquet"
    result = run_cli(Case(score(inp, model, out)))
    assert result.rc == 0, result.stderr
    return out


def test_prune_removes_the_temporary_files_killed_runs_left_anywhere(tmp_path, qwen3_seq_cls):
    """A run killed while it wrote a segment, a model's identity or a request's settings leaves
    a temporary file (`.NAME.PID.tmp`) in that folder; `cache prune` removes every stale one
    (not only the segments'), and a fresh one, which a live run may be writing, stays."""
    inp = write(tmp_path / "rows.jsonl", jsonl(FIRST))
    cache = tmp_path / "cache"
    assert run_cli(Case(score(inp, qwen3_seq_cls, tmp_path / "a.parquet", "--score-cache", str(cache)))).rc == 0
    (segment,) = segments(cache)
    old = time.time() - 2 * 3600
    stale = [
        segment.parent / f".{segment.name}.4242.tmp",
        next((cache / "requests").glob("*.json")).with_name(".0123abcd.json.4242.tmp"),
        next((cache / "models").glob("*.json")).with_name(".0123abcd.json.4242.tmp"),
        cache / ".scorecli-score-cache.json.4242.tmp",
    ]
    for path in stale:
        path.write_bytes(b"half")
        os.utime(path, (old, old))
    fresh = cache / "requests" / ".fresh.json.4343.tmp"
    fresh.write_bytes(b"being written")
    pruned = run_cli(Case(["cache", "prune", str(cache)]))
    assert pruned.rc == 0 and "; tidied 4 damaged or temporary files\n" in pruned.stdout.decode(), pruned.stdout
    assert not [p for p in stale if p.exists()] and fresh.exists() and segment.exists()


def test_truncated_segment_is_passed_over(tmp_path, qwen3_seq_cls):
    """A segment cut short (a disk that lost its tail): one warning line, its pairs scored again,
    the output an uncached run's; `cache info` counts it damaged and `cache prune` removes it."""
    inp = write(tmp_path / "rows.jsonl", jsonl(FIRST))
    cache = tmp_path / "cache"
    result = run_cli(Case(score(inp, qwen3_seq_cls, tmp_path / "a.parquet", "--score-cache", str(cache))))
    assert result.rc == 0, result.stderr
    (segment,) = segments(cache)
    data = segment.read_bytes()
    segment.write_bytes(data[: len(data) // 2])
    result = run_cli(Case(score(inp, qwen3_seq_cls, tmp_path / "b.parquet", "--score-cache", str(cache))))
    assert result.rc == 0, result.stderr
    warnings = [line for line in result.lines() if line.startswith("warning:")]
    assert len(warnings) == 1 and segment.name in warnings[0] and "passed over" in warnings[0], result.stderr
    assert counts(tmp_path / "b.parquet") == (0, items_of(FIRST))
    assert_same(pq.read_table(tmp_path / "b.parquet"), pq.read_table(tmp_path / "a.parquet"))
    info = run_cli(Case(["cache", "info", str(cache)])).stdout.decode()
    assert "  1 damaged segment (passed over" in info, info  # one is one, not "1 damaged segments"
    pruned = run_cli(Case(["cache", "prune", str(cache)]))
    assert pruned.rc == 0 and "; tidied 1 damaged or temporary file\n" in pruned.stdout.decode(), pruned.stdout
    assert not segment.exists() and len(segments(cache)) == 1


def test_a_flipped_byte_fails_the_checksum(tmp_path, qwen3_seq_cls):
    """A changed byte inside a segment's scores (its file still opens): never read as a score."""
    inp = write(tmp_path / "rows.jsonl", jsonl(FIRST))
    cache = tmp_path / "cache"
    assert run_cli(Case(score(inp, qwen3_seq_cls, tmp_path / "a.parquet", "--score-cache", str(cache)))).rc == 0
    (segment,) = segments(cache)
    from scorecli.cache.segments import read_entries

    entries, meta = read_entries(str(segment), segment.parent.name)
    data = bytearray(segment.read_bytes())
    at = data.find(entries.scores[0].tobytes())
    assert at > 0
    data[at + 3] ^= 0x80  # the sign of the first score: a wrong score, were it read
    segment.write_bytes(bytes(data))
    result = run_cli(Case(score(inp, qwen3_seq_cls, tmp_path / "b.parquet", "--score-cache", str(cache))))
    assert result.rc == 0 and "fails its checksum" in result.stderr, result.stderr
    assert counts(tmp_path / "b.parquet") == (0, items_of(FIRST))
    assert_same(pq.read_table(tmp_path / "b.parquet"), pq.read_table(tmp_path / "a.parquet"))
    # `cache info` reads each segment whole: the flipped one is counted damaged; `prune` removes it
    info = run_cli(Case(["cache", "info", str(cache)]))
    assert info.rc == 0 and "1 damaged segment " in info.stdout.decode() + info.stderr, info.stderr
    pruned = run_cli(Case(["cache", "prune", str(cache), "--older-than", "1000d"]))
    assert pruned.rc == 0 and "tidied 1 damaged" in pruned.stdout.decode() + pruned.stderr, pruned.stderr
    assert not segment.exists() and len(segments(cache)) == 1


def test_prune_by_model_and_age(tmp_path, qwen3_seq_cls, bert_cross_encoder):
    inp = write(tmp_path / "rows.jsonl", jsonl(FIRST))
    cache = tmp_path / "cache"
    for k, model in enumerate((qwen3_seq_cls, bert_cross_encoder)):
        result = run_cli(Case(score(inp, model, tmp_path / f"{k}.parquet", "--score-cache", str(cache))))
        assert result.rc == 0, result.stderr
    info = run_cli(Case(["cache", "info", str(cache)])).stdout.decode().splitlines()
    assert f"{2 * items_of(FIRST):,} entries in 2 segments" in info[0], info
    assert len([line for line in info if line.startswith("  model ")]) == 2
    pruned = run_cli(Case(["cache", "prune", str(cache), "--model", bert_cross_encoder]))
    assert pruned.rc == 0 and f"removed {items_of(FIRST)} entries (1 whole segment)" in pruned.stdout.decode()
    info = run_cli(Case(["cache", "info", str(cache)])).stdout.decode()
    assert "qwen3_seq_cls" in info and "bert" not in info, info
    assert " in 1 segment, " in info and " entries, 1 set of settings, 1 segment, " in info, info  # not "1 segments"
    # the cross-encoder's pairs miss now; the decoder's still hit
    result = run_cli(Case(score(inp, bert_cross_encoder, tmp_path / "again.parquet", "--score-cache", str(cache))))
    assert result.rc == 0 and counts(tmp_path / "again.parquet") == (0, items_of(FIRST))
    time.sleep(1.1)
    pruned = run_cli(Case(["cache", "prune", str(cache), "--older-than", "1s"]))
    assert pruned.rc == 0 and f"removed {2 * items_of(FIRST)} entries" in pruned.stdout.decode(), pruned.stdout
    assert run_cli(Case(["cache", "prune", str(tmp_path / "nowhere")])).rc == 2
    assert run_cli(Case(["cache", "prune", str(cache), "--older-than", "soon"])).rc == 2
