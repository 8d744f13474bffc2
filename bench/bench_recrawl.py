"""Second passes over a state: the engine's time on re-crawls and deletions of documents it holds.

Builds a state from ``--docs`` synthetic documents (``synth.py``, seed 11) once, then times the
engine (``process`` + ``commit`` per batch of 500, in one process, start-up not counted) on a
fresh copy of that state for each pass:

- ``unchanged``: the same documents again (a periodic re-crawl that found nothing new);
- ``unchanged-again``: the same documents a third time (timed: the third pass only), when every
  record's fingerprint is current (the second pass refreshed those of the records written
  before a boilerplate line of their source was learned);
- ``changed``: the same ids, half of them with a re-rendered line appended (their old version
  leaves its cluster, the new one is decided);
- ``deleted``: every other document deleted.

Each ``--tree`` (a ``PYTHONPATH``, e.g. ``git worktree add /tmp/base <commit>``) runs every pass
in a fresh process, trees interleaved per round; the events of each pass must be the same for
every tree (checked, the run fails otherwise).

    python bench/bench_recrawl.py --rounds 4 --tree /tmp/base-7297
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parent.parent
BENCH = Path(__file__).resolve().parent
PASSES = ("unchanged", "unchanged-again", "changed", "deleted")


def _corpora(work: Path, docs: int) -> None:
    """The first pass and the three second passes, as JSON lines under ``work``."""
    sys.path.insert(0, str(BENCH))
    from synth import generate

    first = [dict(doc) for doc in generate(docs, 11)]
    rng = random.Random(5)
    lines = {"first": first, "unchanged": first, "changed": [], "deleted": []}
    for i, doc in enumerate(first):
        if rng.random() < 0.5:
            doc = {**doc, "text": doc["text"] + f"\nRendered at 2026-12-06 10:{i % 60:02d}:{i % 57:02d} UTC\n"}
        lines["changed"].append(doc)
        if i % 2 == 0:
            lines["deleted"].append({"id": doc["id"], "deleted": True})
    for name, records in lines.items():
        (work / f"{name}.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))


def _child(state: str, corpus: str, events: str, untimed: int = 0) -> None:
    """Run in a fresh process: one pass over a copy of the state (after ``untimed`` others); print its seconds."""
    from stream_dedupe.api import Deduper
    from stream_dedupe.core.records import parse_document

    records = [parse_document(line, len(line)) for line in Path(corpus).read_bytes().splitlines()]
    deduper = Deduper.open(state)
    engine = deduper.engine
    for _ in range(untimed):
        for start in range(0, len(records), 500):
            engine.process(records[start : start + 500])
            engine.commit()
    out = []
    started = time.perf_counter()
    for start in range(0, len(records), 500):
        out += engine.process(records[start : start + 500])
        engine.commit()
    seconds = time.perf_counter() - started
    deduper.close()
    Path(events).write_bytes(b"".join(orjson.dumps(e, option=orjson.OPT_SORT_KEYS) + b"\n" for e in out))
    print(seconds)


def _run(tree: Path, state: Path, corpus: Path, events: Path, untimed: int = 0) -> float:
    env = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{BENCH}"}
    args = f"{str(state)!r}, {str(corpus)!r}, {str(events)!r}, {untimed}"
    script = f"import bench_recrawl; bench_recrawl._child({args})"
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, check=True, capture_output=True, text=True, cwd=tempfile.gettempdir()
    )
    return float(done.stdout.split()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tree", type=Path, action="append", default=[], help="another tree to compare")
    args = parser.parse_args()
    trees = {"this tree": ROOT, **{str(t): t for t in args.tree}}
    work = Path(tempfile.mkdtemp(prefix="bench-recrawl-"))
    try:
        _corpora(work, args.docs)
        built = work / "built"
        _run(ROOT, built, work / "first.jsonl", work / "first.events")
        times: dict[tuple[str, str], list[float]] = {(p, t): [] for p in PASSES for t in trees}
        digests: dict[tuple[str, str], set[str]] = {key: set() for key in times}
        for _ in range(args.rounds):
            for name in PASSES:
                for label, tree in trees.items():
                    state, events = work / "state", work / "events"
                    shutil.rmtree(state, ignore_errors=True)
                    shutil.copytree(built, state)
                    corpus, untimed = (
                        (work / "unchanged.jsonl", 1) if name == "unchanged-again" else (work / f"{name}.jsonl", 0)
                    )
                    times[name, label].append(_run(tree, state, corpus, events, untimed))
                    digests[name, label].add(hashlib.sha256(events.read_bytes()).hexdigest())
        print(f"{args.docs:,} documents in the state, {args.rounds} rounds, engine seconds (median)")
        print("| pass | " + " | ".join(trees) + " |")
        print("|---|" + "---|" * len(trees))
        for name in PASSES:
            cells = [f"{statistics.median(times[name, t]):.3f}" for t in trees]
            print(f"| {name} | " + " | ".join(cells) + " |")
            if len(set().union(*(digests[name, t] for t in trees))) != 1:
                raise SystemExit(f"the {name} pass gave different events across trees or rounds")
        print("events: identical across trees and rounds")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
