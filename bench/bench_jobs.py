"""``dedupe --jobs 1`` vs ``--jobs N``: whole processes on the same corpus, interleaved rounds.

Each round runs every ``--jobs`` value once (a fresh process, a fresh RocksDB state, events
written to a file) and records wall time and CPU time (user + system of the process and its
workers). Prints medians, docs/s and the ratio of each to ``--jobs 1`` (the median of the
per-round ratios: the machines are shared and noisy), and checks that every run wrote the same
events, byte for byte.

    .venv/bin/python bench/bench_jobs.py --docs 20000 --rounds 3
    .venv/bin/python bench/bench_jobs.py --docs 100000 --rounds 3 --jobs 1 2
"""

from __future__ import annotations

import argparse
import hashlib
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from synth import generate

REPO = Path(__file__).resolve().parents[1]


def run_once(corpus: Path, work: Path, jobs: int) -> tuple[float, float, str]:
    state, events = work / f"state-{jobs}", work / f"events-{jobs}.jsonl"
    shutil.rmtree(state, ignore_errors=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "stream_dedupe", "dedupe", str(corpus), "--state", str(state), "--events",
         str(events), "--no-progress", "--jobs", str(jobs)],
        check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO,
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, hashlib.sha256(events.read_bytes()).hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sd-jobs-") as tmp:
        work = Path(tmp)
        corpus = work / "corpus.jsonl"
        with open(corpus, "wb") as out:
            for doc in generate(args.docs, args.seed):
                out.write(orjson.dumps(doc) + b"\n")
        results: dict[int, list[tuple[float, float, str]]] = {j: [] for j in args.jobs}
        for r in range(args.rounds):
            order = args.jobs[r % len(args.jobs) :] + args.jobs[: r % len(args.jobs)]  # rotate the order
            for jobs in order:
                results[jobs].append(run_once(corpus, work, jobs))
    digests = {d for runs in results.values() for _, _, d in runs}
    base = results[args.jobs[0]]
    print(f"{args.docs:,} docs, {args.rounds} rounds, load average {os.getloadavg()[0]:.1f}; "
          f"identical events in every run: {len(digests) == 1}")
    print(f"{'jobs':>4} {'wall median':>12} {'docs/s':>9} {'CPU median':>11} {'speed vs first (wall)':>22}")
    for jobs, runs in results.items():
        wall = statistics.median(w for w, _, _ in runs)
        cpu = statistics.median(c for _, c, _ in runs)
        ratio = statistics.median(b[0] / w[0] for b, w in zip(base, runs, strict=True))
        print(f"{jobs:>4} {wall:>11.2f}s {args.docs / wall:>9,.0f} {cpu:>10.2f}s {ratio:>21.2f}x")


if __name__ == "__main__":
    main()
