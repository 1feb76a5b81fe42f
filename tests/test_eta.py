"""An honest ETA on a slow model (issue 41): on a stand-in forward whose time goes with its tokens
(tests/slow_cli.py), the progress line has an ETA from the first batch on, never loses it, and
after the first fifth of the run it predicts the end within 20%; a resumed run's first ETA is its
own from its first batch on, and within 25% after its first window (not the 0:00:01 of a rate
that counted the kept rows)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from scorecli.engine.progress import Eta
from tests.test_cli import WORDS, jsonl, write
from tests.test_new_user import read_events, slow_run
from tests.test_resume import stop_after

SECONDS_PER_TOKEN = "0.004t"


def rows(n: int, seed: int = 3) -> list[dict]:
    """Rows of 1 to 4 items of 2 to 14 words: their tokens vary threefold from row to row."""
    rng = random.Random(seed)
    words = lambda lo, hi: " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))
    return [
        {"id": i, "query": words(2, 6), "items": [words(2, 14) for _ in range(rng.randint(1, 4))]} for i in range(n)
    ]


def predictions(events: list[dict]) -> tuple[list[tuple[float, float | None]], float, float]:
    """(t, ETA) of every batch, when the progress line started and when the last batch was done."""
    start = next(e["t"] for e in events if e["event"] == "start")
    batches = [(e["t"], e["eta"]) for e in events if e["event"] == "batch"]
    return batches, start, batches[-1][0]


@pytest.mark.e2e
def test_the_eta_shows_from_the_first_batch_and_holds_within_20_percent(tmp_path, qwen3_seq_cls):
    inp = write(tmp_path / "in.jsonl", jsonl(rows(36)))
    out, events = tmp_path / "o.parquet", tmp_path / "events.jsonl"
    args = ["score", inp, "--model", qwen3_seq_cls, "--out", str(out), "--max-batch-tokens", "48"]
    proc = slow_run(events, SECONDS_PER_TOKEN, [*args, "--window-seconds", "1"])
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr.decode()
    batches, start, end = predictions(read_events(events))
    assert len(batches) >= 20 and all(eta is not None for _, eta in batches), batches[:3]
    late = [(t, eta) for t, eta in batches if t - start >= 0.2 * (end - start)]
    errors = [abs(t + eta - end) / (end - start) for t, eta in late]
    assert max(errors) <= 0.2, [round(e, 2) for e in errors]


@pytest.mark.e2e
def test_a_resumed_run_estimates_its_own_rows(tmp_path, qwen3_seq_cls):
    inp = write(tmp_path / "in.jsonl", jsonl(rows(30, seed=5)))
    out = tmp_path / "o.parquet"
    args = ["score", inp, "--model", qwen3_seq_cls, "--out", str(out), "--max-batch-tokens", "48"]
    args += ["--window-seconds", "1"]
    kept, _ = stop_after(slow_run(tmp_path / "first.jsonl", SECONDS_PER_TOKEN, args), Path(f"{out}.partial"), 4)
    assert kept >= 4  # windows of 1, 2, 4 rows, ...: a third of the rows or more are kept
    proc = slow_run(tmp_path / "again.jsonl", SECONDS_PER_TOKEN, [*args, "--resume"])
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr.decode()
    events = read_events(tmp_path / "again.jsonl")
    batches, start, end = predictions(events)
    assert batches[0][1] is not None  # from the first batch on
    first_part = next(e["t"] for e in events if e["event"] == "part")
    t, eta = next((t, eta) for t, eta in batches if t >= first_part)  # after the first window
    assert abs(t + eta - end) <= 0.25 * (end - start), (t, eta, start, end)


def test_eta_counts_tokens_not_rows():
    """Two rows done of ten, the second window three times the first's tokens per row: the rows
    left cost the mean tokens of the rows read, at the measured tokens per second."""
    eta = Eta(10)
    eta.start(1, 100)
    eta.started -= 4.0  # the first window started 4 s ago
    eta.finish(1, 100)
    eta.start(1, 300)
    at = eta.at(0.25)  # 175 tokens in 4 s; 8 rows of 200 tokens and 225 tokens left
    assert at is not None and at - eta.started == pytest.approx(4.0 + (8 * 200 + 225) / (175 / 4), rel=1e-3)
    assert Eta(None).at(1.0) is None


def test_no_progress_line_leaves_a_blank_line_where_stderr_is_not_a_terminal(monkeypatch):
    """Under cron, in CI or in a pipe the progress line is off; rich before 14.3 (pyproject allows
    13.8) printed an empty line when such a Progress stopped, a blank line before every run's
    error or summary. Its Progress.stop is put back here, and nothing may reach the console."""
    import io

    from rich.console import Console
    from rich.progress import Progress

    from scorecli.bench import bench_progress
    from scorecli.engine.progress import Tracker

    def stop_before_14_3(self) -> None:
        self.live.stop()
        if not self.console.is_interactive and not self.console.is_jupyter:
            self.console.print()

    monkeypatch.setattr(Progress, "stop", stop_before_14_3)
    log = io.StringIO()
    console = Console(file=log, force_terminal=False)
    with Tracker(console, 10) as tracker:
        tracker.progress.advance(tracker.task, 3)
    with bench_progress(console):
        pass
    assert log.getvalue() == ""
