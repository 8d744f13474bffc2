"""Reopening a state: wall time of ``dedupe`` of one new document over an existing state.

Each variant gets its own copy of the state (a run writes, and a warm-start file is only valid
for the state it was saved from) and runs in fresh processes, the variants interleaved per round:

- ``cold``: this tree, the warm-start file removed before every run (indexes rebuilt from the state);
- ``warm``: this tree, the file the previous run saved (the first run saves it);
- ``before``: the tree at ``--before`` (a ``PYTHONPATH``, e.g. ``git archive`` of an older commit).

    python bench/bench_reopen.py --state /tmp/s150state --rounds 3 [--before /tmp/base]
    python bench/bench_reopen.py --corpus /tmp/synth150k.jsonl --rounds 3   # builds the state first
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _dedupe(args: list[str], pythonpath: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(pythonpath)}
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "stream_dedupe", "dedupe", *args, "--no-progress"],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=tempfile.gettempdir(),
    )
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--state", type=Path, help="an existing state directory (copied, never written)")
    parser.add_argument("--corpus", type=Path, help="JSON lines to build the state from (when --state is not given)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--before", type=Path, help="another tree to compare (its PYTHONPATH)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-reopen-"))
    try:
        source = args.state
        if source is None:
            if args.corpus is None:
                parser.error("give --state or --corpus")
            source = work / "built"
            _dedupe([str(args.corpus), "--state", str(source)], ROOT)
        variants = {"cold": ROOT, "warm": ROOT, **({"before": args.before} if args.before else {})}
        for name in variants:
            shutil.copytree(source, work / name)
            (work / name / "warm-start.npz").unlink(missing_ok=True)
        times: dict[str, list[float]] = {name: [] for name in variants}
        for round_ in range(args.rounds + 1):  # round 0: every variant's first run (the warm one saves its file)
            for name, tree in variants.items():
                if name == "cold":
                    (work / name / "warm-start.npz").unlink(missing_ok=True)
                line = work / f"doc-{round_}.jsonl"
                line.write_text(
                    json.dumps({"id": f"reopen-{round_}", "text": f"one new page number {round_} here"}) + "\n"
                )
                seconds = _dedupe([str(line), "--state", str(work / name)], tree)
                if round_:
                    times[name].append(seconds)
        report = {
            name: {"median_s": round(statistics.median(t), 3), "runs_s": [round(x, 3) for x in t]}
            for name, t in times.items()
        }
        print(json.dumps(report))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
