"""numba's fixed cost per process: CPU from ``jit.enable()`` to a first signed batch, cached kernels.

Each round runs every checkout once in a fresh process (its tree on ``PYTHONPATH``, run from a
temporary directory so that the current tree does not shadow it) and reports the child's CPU
seconds (user + system); prints the median and minimum per checkout, and whether the child had
scipy.linalg loaded at the end (numba's BLAS probe imports it unless ``jit.enable`` hides it).

    .venv/bin/python bench/numba_fixed_cost.py --rounds 5
    .venv/bin/python bench/numba_fixed_cost.py --rounds 5 --checkout /tmp/base   # beside another tree
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CHILD = """
import resource, sys
from stream_dedupe.config import DedupeParams
from stream_dedupe.core import jit
from stream_dedupe.core.signer import Signer
jit.enable()
Signer(DedupeParams()).sign(["a few words to sign with the compiled kernels"] * 3)
usage = resource.getrusage(resource.RUSAGE_SELF)
print(usage.ru_utime + usage.ru_stime, int("scipy.linalg" in sys.modules))
"""


def run(checkout: Path, workdir: str) -> tuple[float, int]:
    """CPU seconds of one fresh process over ``checkout``, and 1 if it loaded scipy.linalg."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    env.pop("STREAM_DEDUPE_JIT", None)
    out = subprocess.run([sys.executable, "-c", CHILD], cwd=workdir, env=env, capture_output=True, check=True)
    cpu, scipy_loaded = out.stdout.split()
    return float(cpu), int(scipy_loaded)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--checkout", type=Path, action="append", default=[], help="another tree (repeatable)")
    args = parser.parse_args()
    checkouts = [REPO, *args.checkout]
    results: dict[Path, list[tuple[float, int]]] = {c: [] for c in checkouts}
    with tempfile.TemporaryDirectory(prefix="sd-numba-cost-") as workdir:
        for checkout in checkouts:  # a first run each: numba's cache of every tree is warm
            run(checkout, workdir)
        for _ in range(args.rounds):
            for checkout in checkouts:
                results[checkout].append(run(checkout, workdir))
    print(f"{'checkout':40s} {'cpu median':>11s} {'cpu min':>8s}  scipy.linalg loaded")
    for checkout, runs in results.items():
        cpus = [cpu for cpu, _ in runs]
        loaded = {flag for _, flag in runs}
        print(f"{checkout!s:40s} {statistics.median(cpus):10.3f}s {min(cpus):7.3f}s  {sorted(loaded)}")


if __name__ == "__main__":
    main()
