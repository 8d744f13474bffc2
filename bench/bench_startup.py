"""Start-up of ``stream-dedupe dedupe`` on a one-line file: fresh processes, interleaved rounds.

Each round runs every given checkout once (a new process, a new state directory) and records
wall time and CPU time (user + system, of the child: steadier than wall time on a shared
machine). Prints the median and the minimum per checkout.

    .venv/bin/python bench/bench_startup.py --rounds 15
    .venv/bin/python bench/bench_startup.py --rounds 15 --checkout /tmp/base   # beside another tree
    .venv/bin/python bench/bench_startup.py --breakdown    # where one run's time goes (python -X importtime)
    .venv/bin/python bench/bench_startup.py --pyc ...      # with bytecode caches, as an installed package
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


#: Environment of the children; ``--pyc`` lets them write and use bytecode caches (an installed
#: package has them; this machine's PYTHONDONTWRITEBYTECODE=1 makes every run compile our sources).
ENV = dict(os.environ)


def drop_bytecode(checkout: Path) -> int:
    """Delete the checkout's ``.pyc`` files (not numba's kernel cache beside them): every tree compiles alike.

    Without ``--pyc`` the children write no bytecode, but they still read what is there: a tree
    that once ran with caches would otherwise start faster than a fresh ``git archive`` one.
    """
    caches = list((checkout / "stream_dedupe").rglob("__pycache__/*.pyc"))
    for cache in caches:
        cache.unlink()
    return len(caches)


def run_once(checkout: Path, work: Path) -> tuple[float, float]:
    state = work / "state"
    shutil.rmtree(state, ignore_errors=True)
    env = {**ENV, "PYTHONPATH": str(checkout)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "stream_dedupe",
            "dedupe",
            str(work / "one.jsonl"),
            "--state",
            str(state),
            "--no-progress",
        ],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=work,
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def breakdown(work: Path, runs: int = 5) -> None:
    """Import time per top-level package (median self time over ``runs`` processes) and the rest."""
    per_run: list[dict[str, float]] = []
    cpus = []
    for _ in range(runs):
        state = work / "state"
        shutil.rmtree(state, ignore_errors=True)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        done = subprocess.run(
            [
                sys.executable,
                "-X",
                "importtime",
                "-m",
                "stream_dedupe",
                "dedupe",
                str(work / "one.jsonl"),
                "--state",
                str(state),
                "--no-progress",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            cwd=work,
            env=ENV,
        )
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
        groups: dict[str, float] = {}
        for line in done.stderr.decode().splitlines():
            if line.startswith("import time:") and "|" in line and "self [us]" not in line:
                self_us, _, name = (part.strip() for part in line[len("import time:") :].split("|"))
                top = name.split(".")[0]
                top = {"click": "typer", "_click": "typer", "pydantic_core": "pydantic"}.get(top, top)
                groups[top] = groups.get(top, 0.0) + int(self_us) / 1e6
        per_run.append(groups)
    names = {n for g in per_run for n in g}
    medians = {n: statistics.median(g.get(n, 0.0) for g in per_run) for n in names}
    cpu = statistics.median(cpus)
    imports = sum(medians.values())
    print(
        f"CPU median {cpu:.3f} s under -X importtime; imports {imports:.3f} s, the rest (run, interpreter) "
        f"{cpu - imports:.3f} s"
    )
    for name, seconds in sorted(medians.items(), key=lambda kv: -kv[1])[:12]:
        print(f"  {name:<24} {seconds:.3f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--checkout", action="append", type=Path, default=[], help="another source tree")
    parser.add_argument("--breakdown", action="store_true", help="import time per package instead")
    parser.add_argument(
        "--pyc", action="store_true", help="children write/use bytecode caches (unset PYTHONDONTWRITEBYTECODE)"
    )
    args = parser.parse_args()
    if args.pyc:
        ENV.pop("PYTHONDONTWRITEBYTECODE", None)
    if args.breakdown:
        with tempfile.TemporaryDirectory(prefix="sd-startup-") as tmp:
            (Path(tmp) / "one.jsonl").write_bytes(LINE)
            breakdown(Path(tmp))
        return
    checkouts = [REPO, *args.checkout]
    if not args.pyc:
        for checkout in checkouts:
            drop_bytecode(checkout)
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
