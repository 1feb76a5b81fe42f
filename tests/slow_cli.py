"""The real `scorecli` with a slow forward, recording what the run showed and kept, for tests of
progress and checkpoints on a slow model (tests/test_new_user.py):

    python -m tests.slow_cli EVENTS SECONDS_PER_BATCH score ...
    python -m tests.slow_cli EVENTS SECONDS_PER_TOKENt score ...   (e.g. 0.002t)

Every batch scored after the start-up self-check first sleeps SECONDS_PER_BATCH, or SECONDS_PER_TOKEN
times its tokens (a model whose time goes with the tokens, as a real one's does). EVENTS gets one
JSON line per event, `t` in seconds since the process started:
- `start`: the progress line starts (the model is loaded and checked);
- `batch`: a batch is done; `completed` is the rows the progress line shows done, `eta` the
  seconds it shows left (null: no ETA yet);
- `part`: a part is durable; `rows` is the input rows it holds.
"""

from __future__ import annotations

import json
import sys
import time

from scorecli import scorer
from scorecli.cli import main
from scorecli.engine import progress
from scorecli.io import parts

STARTED = time.perf_counter()


def record(path: str, event: str, **fields) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps({"event": event, "t": time.perf_counter() - STARTED, **fields}) + "\n")


def patch(events: str, delay: str) -> None:
    score_batch, enter, work, add = (
        scorer.Scorer._score_batch,
        progress.Tracker.__enter__,
        progress.Tracker.work,
        parts.PartStore.add,
    )

    def slow_batch(self, batch, forward=None):
        if hasattr(self, "self_check_note"):  # a batch of the run, not the self-check's probe
            time.sleep(float(delay[:-1]) * batch.num_tokens if delay.endswith("t") else float(delay))
        return score_batch(self, batch, forward)

    def entered(self):
        record(events, "start")
        return enter(self)

    def worked(self, items, tokens):
        work(self, items, tokens)
        task = self.progress.tasks[0]
        record(events, "batch", completed=task.completed, eta=self.seconds_left())

    def added(self, table):
        part = add(self, table)
        record(events, "part", rows=part.rows)
        return part

    scorer.Scorer._score_batch = slow_batch
    progress.Tracker.__enter__ = entered
    progress.Tracker.work = worked
    parts.PartStore.add = added


if __name__ == "__main__":
    patch(sys.argv[1], sys.argv[2])
    sys.argv = ["scorecli", *sys.argv[3:]]
    main()
