"""``dedupe --jobs 1`` vs ``--jobs N``: whole processes on the same corpus, interleaved rounds.

Each round runs every ``--jobs`` value once (a fresh process, a fresh RocksDB state, events
written to a file) and records wall time and CPU time (user + system of the process and its
workers). Prints medians, docs/s and the ratio of each to ``--jobs 1`` (the median of the
per-round ratios: the machines are shared and noisy), and checks that every run wrote the same
events, byte for byte.

    .venv/bin/python bench/bench_jobs.py --docs 20000 --rounds 3
    .venv/bin/python bench/bench_jobs.py --docs 100000 --rounds 3 --jobs 1 2
    .venv/bin/python bench/bench_jobs.py --docs 20000 --rounds 2 --split   # CPU of the decide process vs the workers
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
        [
            sys.executable,
            "-m",
            "stream_dedupe",
            "dedupe",
            str(corpus),
            "--state",
            str(state),
            "--events",
            str(events),
            "--no-progress",
            "--jobs",
            str(jobs),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=REPO,
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, hashlib.sha256(events.read_bytes()).hexdigest()


def split_once(corpus: Path, jobs: int) -> dict[str, float]:
    """One in-memory run in this process: wall, CPU of this (the deciding) process and of the workers."""
    from stream_dedupe.config import DedupeParams, RuntimeLimits
    from stream_dedupe.core import jit
    from stream_dedupe.core.engine import DedupeEngine
    from stream_dedupe.embedded import run
    from stream_dedupe.sign_pool import start_pool
    from stream_dedupe.storage.memory import MemoryStore

    jit.enable()
    pool = start_pool(jobs, 1 << 40)
    engine = DedupeEngine(DedupeParams(), MemoryStore(), RuntimeLimits())
    engine.signer.sign(["load the kernels before the clock starts"])
    started, cpu = time.perf_counter(), time.process_time()
    run(engine, [str(corpus)], None, 512, 1 << 20, pool=pool)
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    if pool is not None:
        pool.close()
    workers = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "wall": wall,
        "main_cpu": cpu,
        "worker_cpu": workers.ru_utime + workers.ru_stime,
        "presigned": engine.counters["presigned"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--split", action="store_true", help="in-memory runs: CPU of the decide process vs workers")
    parser.add_argument("--split-one", nargs=2, metavar=("JOBS", "CORPUS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.split_one:
        print(orjson.dumps(split_once(Path(args.split_one[1]), int(args.split_one[0]))).decode())
        return
    with tempfile.TemporaryDirectory(prefix="sd-jobs-") as tmp:
        work = Path(tmp)
        corpus = work / "corpus.jsonl"
        with open(corpus, "wb") as out:
            for doc in generate(args.docs, args.seed):
                out.write(orjson.dumps(doc) + b"\n")
        if args.split:
            print(f"{'jobs':>4} {'wall':>7} {'decide-process CPU':>19} {'workers CPU':>12} {'presigned':>10}")
            for r in range(args.rounds):
                for jobs in args.jobs[r % len(args.jobs) :] + args.jobs[: r % len(args.jobs)]:
                    out = subprocess.run(
                        [sys.executable, __file__, "--split-one", str(jobs), str(corpus)],
                        check=True,
                        capture_output=True,
                        cwd=REPO,
                    ).stdout
                    m = orjson.loads(out.splitlines()[-1])
                    print(
                        f"{jobs:>4} {m['wall']:>6.2f}s {m['main_cpu']:>18.2f}s {m['worker_cpu']:>11.2f}s "
                        f"{m['presigned']:>10,}"
                    )
            return
        results: dict[int, list[tuple[float, float, str]]] = {j: [] for j in args.jobs}
        for r in range(args.rounds):
            order = args.jobs[r % len(args.jobs) :] + args.jobs[: r % len(args.jobs)]  # rotate the order
            for jobs in order:
                results[jobs].append(run_once(corpus, work, jobs))
    digests = {d for runs in results.values() for _, _, d in runs}
    base = results[args.jobs[0]]
    print(
        f"{args.docs:,} docs, {args.rounds} rounds, load average {os.getloadavg()[0]:.1f}; "
        f"identical events in every run: {len(digests) == 1}"
    )
    print(f"{'jobs':>4} {'wall median':>12} {'docs/s':>9} {'CPU median':>11} {'speed vs first (wall)':>22}")
    for jobs, runs in results.items():
        wall = statistics.median(w for w, _, _ in runs)
        cpu = statistics.median(c for _, c, _ in runs)
        ratio = statistics.median(b[0] / w[0] for b, w in zip(base, runs, strict=True))
        rounds = " ".join(f"{w:.2f}" for w, _, _ in runs)
        print(f"{jobs:>4} {wall:>11.2f}s {args.docs / wall:>9,.0f} {cpu:>10.2f}s {ratio:>21.2f}x   rounds: {rounds}")


if __name__ == "__main__":
    main()
