"""Start-up of ``stream-dedupe dedupe`` on a one-line file: fresh processes, interleaved rounds.

Each round runs every given checkout once (a new process, a new state directory) and records
wall time and CPU time (user + system, of the child: steadier than wall time on a shared
machine). Prints the median and the minimum per checkout.

    .venv/bin/python bench/bench_startup.py --rounds 15
    .venv/bin/python bench/bench_startup.py --rounds 15 --checkout /tmp/base   # beside another tree
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LINE = b'{"id": "a", "text": "one short document to dedupe at start-up"}\n'


def run_once(checkout: Path, work: Path) -> tuple[float, float]:
    state = work / "state"
    shutil.rmtree(state, ignore_errors=True)
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "stream_dedupe", "dedupe", str(work / "one.jsonl"), "--state", str(state),
         "--no-progress"],
        check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=work,
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--checkout", action="append", type=Path, default=[], help="another source tree")
    args = parser.parse_args()
    checkouts = [REPO, *args.checkout]
    with tempfile.TemporaryDirectory(prefix="sd-startup-") as tmp:
        work = Path(tmp)
        (work / "one.jsonl").write_bytes(LINE)
        for checkout in checkouts:  # warm: compile the kernels into each tree's cache, fill the page cache
            run_once(checkout, work)
        results: dict[Path, list[tuple[float, float]]] = {c: [] for c in checkouts}
        for _ in range(args.rounds):
            for checkout in checkouts:
                results[checkout].append(run_once(checkout, work))
    print(f"{'checkout':<40} {'wall median':>12} {'wall min':>9} {'cpu median':>11} {'cpu min':>8}")
    for checkout, runs in results.items():
        walls, cpus = [w for w, _ in runs], [c for _, c in runs]
        print(
            f"{checkout!s:<40} {statistics.median(walls):>11.3f}s {min(walls):>8.3f}s "
            f"{statistics.median(cpus):>10.3f}s {min(cpus):>7.3f}s"
        )


if __name__ == "__main__":
    main()
