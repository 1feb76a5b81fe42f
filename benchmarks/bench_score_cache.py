"""The score cache at scale and on a nightly job (issue 40, README: Nightly jobs).

1. `lookups`: a cache of 10 million entries (one label; random 128-bit keys, as `cache.keys`
   makes them) written as one segment, then, in a fresh process: opening it (memory-mapped,
   checksum verified), its resident memory per entry, and looking up 1 million keys (90% present)
   in windows of 65,536 keys, as a run looks a window's pairs up; also how fast pair keys are
   computed from text. Goals: >= 1 million lookups/s on 2 cores, <= 32 bytes resident per entry.
2. `nightly`: a nightly job on a real model, whole processes, alternated: the second night's
   rows (90% of their pairs scored the night before, 10% new items) uncached, and cached after the
   first night; and the first night uncached and with an empty cache (what a cold cache costs).
   Goals: >= 5x faster with 90% hits; a cold cache costs <= 5%.

    python benchmarks/bench_score_cache.py lookups [--entries 10000000]
    python benchmarks/bench_score_cache.py nightly --model minilm --rows 2000 --items 20
    python benchmarks/bench_score_cache.py nightly --model smollm2-judge --rows 150 --items 10
    python benchmarks/bench_score_cache.py nightly --model minilm --rows 2000 --items 20 --listed 1
"""

from __future__ import annotations

import argparse
import json
import random
import shlex
import subprocess
import sys

import _common as C

# the child of `lookups`: open the cache, measure memory and lookups, print JSON
LOOKUP_CHILD = r"""
import json, os, sys, time
import numpy as np, psutil
from scorecli.cache.store import CacheStore
from scorecli.cache.index import Index
from scorecli.cache.keys import keys_of
from scorecli.core.rows import Row
location, profile, queries = sys.argv[1], sys.argv[2], sys.argv[3]
proc = psutil.Process()
base = proc.memory_info().rss
t = time.perf_counter()
store = CacheStore(location, create=False)
index = Index(1, False)
for name in store.segment_names(profile):
    index.open(store.read(profile, name))
opened = time.perf_counter() - t
entries = index.size
resident = proc.memory_info().rss - base
q = np.load(queries)
t, cpu = time.perf_counter(), time.process_time()
found = 0
for start in range(0, len(q), 65536):
    f, _, _ = index.lookup(q[start:start + 65536])
    found += int(f.sum())
looked, looked_cpu = time.perf_counter() - t, time.process_time() - cpu
after = proc.memory_info().rss - base
rows = [Row("query %d about something" % (i % 1000), ["passage %d with a few words of text in it" % i], None, None) for i in range(200000)]
t, cpu = time.perf_counter(), time.process_time()
keys_of(bytes(16), rows)
keyed, keyed_cpu = time.perf_counter() - t, time.process_time() - cpu
print(json.dumps({"entries": entries, "open_s": opened, "resident_bytes": resident, "resident_after_lookups": after,
                  "lookups": len(q), "found": found, "lookup_s": looked, "lookup_cpu": looked_cpu,
                  "keys_per_s": len(rows) / keyed, "keys_per_cpu_s": len(rows) / keyed_cpu,
                  "load": os.getloadavg()[0]}))
"""


def lookups(args) -> None:
    import numpy as np

    from scorecli.cache.segments import Entries
    from scorecli.cache.store import CacheStore

    work = C.workdir("cache-lookups")
    rng = np.random.default_rng(0)
    n = args.entries
    print(f"writing a cache of {n:,} entries ...", file=sys.stderr, flush=True)
    keys = rng.integers(0, 2**63, size=(n, 2), dtype=np.uint64) * np.uint64(2) + rng.integers(
        0, 2, size=(n, 2), dtype=np.uint64
    )
    scores = rng.standard_normal((n, 1), dtype=np.float32)
    store = CacheStore(str(work / "cache"), create=True)
    profile = "0" * 32
    store.write(profile, Entries.of(keys, scores, None), {"identity": "bench", "name": "synthetic"})
    present = keys[rng.integers(0, n, size=int(args.lookups * 0.9))]
    absent = rng.integers(0, 2**63, size=(args.lookups - len(present), 2), dtype=np.uint64)
    q = np.concatenate([present, absent])
    q = q[rng.permutation(len(q))]
    np.save(work / "queries.npy", q)
    size = sum(p.stat().st_size for p in (work / "cache").rglob("*.arrow"))
    out = subprocess.run(
        [C.PYTHON, "-c", LOOKUP_CHILD, str(work / "cache"), profile, str(work / "queries.npy")],
        capture_output=True,
        text=True,
        cwd=C.ROOT,
        check=True,
    )
    r = json.loads(out.stdout)
    print(f"cache: {r['entries']:,} entries, {size / 1e6:,.0f} MB on disk; opened in {r['open_s']:.2f} s")
    print(
        f"resident memory: {r['resident_bytes'] / r['entries']:.1f} bytes per entry after opening, "
        f"{r['resident_after_lookups'] / r['entries']:.1f} after the lookups (goal <= 32)"
    )
    print(
        f"lookups: {r['lookups']:,} keys ({r['found']:,} found) in {r['lookup_s']:.2f} s wall = "
        f"{r['lookups'] / r['lookup_s']:,.0f} per second; {r['lookup_cpu']:.2f} s CPU = "
        f"{r['lookups'] / r['lookup_cpu']:,.0f} per CPU second (goal >= 1,000,000; load {r['load']:.1f})"
    )
    print(
        f"keys computed from text: {r['keys_per_s']:,.0f} pairs per second wall, "
        f"{r['keys_per_cpu_s']:,.0f} per CPU second (one thread)"
    )


def nightly_rows(rows: int, items: int, seed: int, pool: list[str], listed: int = 4) -> tuple[list[dict], list[dict]]:
    """(first night, second night): a catalogue re-ranked against the same queries; the second
    night one item in ten replaced by a new one. `listed`: how many rows list a catalogue text,
    on average (1: every row's items are its own, as a retriever's candidates for distinct
    queries mostly are)."""
    rng = random.Random(seed)
    catalogue = [C.words(rng, pool, rng.randint(12, 30)) for _ in range(rows * items // listed)]
    if listed == 1:
        first = [
            {"id": r, "query": C.words(rng, pool, rng.randint(4, 10)), "items": catalogue[r * items : (r + 1) * items]}
            for r in range(rows)
        ]
    else:
        first = [
            {"id": r, "query": C.words(rng, pool, rng.randint(4, 10)), "items": rng.sample(catalogue, items)}
            for r in range(rows)
        ]
    second = []
    for row in first:
        new = [C.words(rng, pool, rng.randint(12, 30)) if rng.random() < 0.1 else x for x in row["items"]]
        second.append({**row, "items": new})
    return first, second


def nightly(args) -> None:
    work = C.workdir("cache-nightly")
    first, second = nightly_rows(args.rows, args.items, 0, C.word_pool(), args.listed)
    C.write_jsonl(work / "first.jsonl", first)
    C.write_jsonl(work / "second.jsonl", second)
    changed = sum(a != b for r1, r2 in zip(first, second) for a, b in zip(r1["items"], r2["items"]))
    total = args.rows * args.items
    distinct = len({x for r in second for x in r["items"]})
    print(
        f"{args.rows:,} rows x {args.items} items = {total:,} pairs; the second night {changed:,} new ({changed / total:.1%}); "
        f"{distinct:,} distinct item texts"
    )
    scorecli = C.scorecli_cmd("score")

    def cmd(inp: str, out: str, cache: str | None, seed_cache: str | None = None) -> list[str]:
        line = [*scorecli, str(work / inp), "--model", args.model, "--out", str(work / out), "--quiet"]
        if cache is None:
            return line
        line += ["--score-cache", str(work / cache)]
        prepare = f"rm -rf {shlex.quote(str(work / cache))}"
        if seed_cache:
            prepare += f" && cp -r {shlex.quote(str(work / seed_cache))} {shlex.quote(str(work / cache))}"
        return ["sh", "-c", f"{prepare} && exec {shlex.join(line)}"]

    log = work / "log.txt"
    print("filling the first night's cache ...", file=sys.stderr, flush=True)
    C.run_process(cmd("first.jsonl", "seed.parquet", "night1"), None, log)
    pairs = [
        (
            C.Contender("second night, uncached", cmd("second.jsonl", "u2.parquet", None)),
            C.Contender("second night, cached (90% hits)", cmd("second.jsonl", "c2.parquet", "cache2", "night1")),
        ),
        (
            C.Contender("first night, uncached", cmd("first.jsonl", "u1.parquet", None)),
            C.Contender("first night, empty cache", cmd("first.jsonl", "c1.parquet", "cache1")),
        ),
    ]
    for uncached, cached in pairs:
        C.alternate([uncached, cached], args.repeats, log, warmup=[])
        ratio = uncached.median_s / cached.median_s
        print(
            f"{cached.name}: {cached.median_s:.2f} s (runs {cached.times()}) vs {uncached.name}: "
            f"{uncached.median_s:.2f} s (runs {uncached.times()}): {ratio:.2f}x; CPU {uncached.median_cpu:.1f} s vs "
            f"{cached.median_cpu:.1f} s; peak RSS {uncached.median_rss:.0f} vs {cached.median_rss:.0f} MiB",
            flush=True,
        )
    import pyarrow.parquet as pq

    meta = pq.read_table(work / "c2.parquet").schema.metadata
    print(
        f"cached second night: {meta[b'score_cache_hits'].decode()} hits, {meta[b'score_cache_misses'].decode()} misses"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    a = sub.add_parser("lookups")
    a.add_argument("--entries", type=int, default=10_000_000)
    a.add_argument("--lookups", type=int, default=1_000_000)
    b = sub.add_parser("nightly")
    b.add_argument("--model", default="minilm")
    b.add_argument("--rows", type=int, default=2000)
    b.add_argument("--items", type=int, default=20)
    b.add_argument("--repeats", type=int, default=2)
    b.add_argument(
        "--listed",
        type=int,
        default=4,
        help="how many rows list each catalogue text on average (1: each row's items its own)",
    )
    args = parser.parse_args()
    print(f"{C.machine() if hasattr(C, 'machine') else ''}", file=sys.stderr)
    (lookups if args.what == "lookups" else nightly)(args)


if __name__ == "__main__":
    main()
