"""Cost of one large group of copies: ``dedupe`` over N copies of one page beside N distinct pages.

A crawl can hold thousands of URLs with the same content (a soft-404, a login wall, a mirrored
file) or with the same content and a counter (a ticket number, a visit id). This script measures
how the engine's cost grows with the size of such a group, one fresh ``dedupe`` process per run
(RocksDB state, events file), the three corpora interleaved per size:

* ``distinct``: N pages of 300 random words (the baseline);
* ``exact``: N copies of one such page under N ids (one content group);
* ``near``: the same page with a different number appended to each copy (one near-duplicate cluster).

Prints wall seconds, docs/s and each corpus's time over the baseline's at every size; a cost that
grows with the group shows up as a ratio that grows with N (linear per document: quadratic in all).
``--checkout DIR`` (repeatable) runs another source tree beside this one (``git archive REV
stream_dedupe | tar -x -C DIR``), interleaved, on the same corpora.

    .venv/bin/python bench/bench_groups.py --sizes 1000,5000   # ~4 min: the near copies are quadratic
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parents[1]
KINDS = ("distinct", "exact", "near")


def write_corpus(path: Path, kind: str, docs: int, seed: int = 1) -> None:
    """``docs`` JSON lines of one ``kind`` (see the module docstring)."""
    rng = random.Random(seed)
    vocabulary = [f"w{i}" for i in range(5000)]
    page = " ".join(rng.choice(vocabulary) for _ in range(300))
    with path.open("wb") as out:
        for i in range(docs):
            if kind == "distinct":
                text = " ".join(rng.choice(vocabulary) for _ in range(300))
            elif kind == "exact":
                text = page
            else:
                text = f"{page} visit {i} ticket {i * 7}"
            out.write(orjson.dumps({"id": f"{kind}-{i}", "text": text}) + b"\n")


def run_once(corpus: Path, work: Path, checkout: Path = REPO, extra: tuple[str, ...] = ()) -> tuple[float, str]:
    """Wall seconds of one fresh ``dedupe`` of the ``checkout`` tree over ``corpus``, and its representatives."""
    state, events = work / "state", work / "events.jsonl"
    shutil.rmtree(state, ignore_errors=True)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "stream_dedupe", "dedupe", str(corpus), "--state", str(state),
         "--events", str(events), "--no-progress", "--jobs", "1", *extra],
        check=True, cwd=work, env={**os.environ, "PYTHONPATH": str(checkout)},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    wall = time.perf_counter() - started
    found = re.search(r"representatives \(the deduped set\)\s+([\d,]+)", done.stderr)
    return wall, found.group(1) if found else "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000", help="comma-separated N (1,000 near copies: ~6 s, quadratic)")
    parser.add_argument("--checkout", action="append", type=Path, default=[], help="another source tree")
    parser.add_argument("--kinds", default=",".join(KINDS), help="corpora to run (distinct is the baseline)")
    parser.add_argument("--max-bucket-size", type=int, help="passed to dedupe (default: dedupe's, 500)")
    args = parser.parse_args()
    checkouts = [REPO, *args.checkout]
    kinds = ["distinct", *(k for k in args.kinds.split(",") if k != "distinct")]
    unknown = set(kinds) - set(KINDS)
    if unknown:
        parser.error(f"unknown --kinds {sorted(unknown)}: choose from {', '.join(KINDS)}")
    extra = () if args.max_bucket_size is None else ("--max-bucket-size", str(args.max_bucket_size))
    print("| tree | N | corpus | wall s | docs/s | over distinct | representatives |")
    print("|---|---|---|---|---|---|---|", flush=True)
    with tempfile.TemporaryDirectory(prefix="sd-groups-") as tmp:
        work = Path(tmp)
        for size in (int(s) for s in args.sizes.split(",")):
            walls: dict[tuple[Path, str], float] = {}
            kept: dict[tuple[Path, str], str] = {}
            for kind in kinds:
                corpus = work / f"{kind}-{size}.jsonl"
                write_corpus(corpus, kind, size)
                for checkout in checkouts:  # interleaved: the trees share the machine's state of the moment
                    walls[checkout, kind], kept[checkout, kind] = run_once(corpus, work, checkout, extra)
            for checkout in checkouts:
                for kind in kinds:
                    wall, ratio = walls[checkout, kind], walls[checkout, kind] / walls[checkout, "distinct"]
                    name = "this" if checkout == REPO else checkout.name
                    row = f"| {name} | {size:,} | {kind} | {wall:.2f} | {size / wall:,.0f} | {ratio:.1f}x |"
                    row += f" {kept[checkout, kind]} |"
                    print(row, flush=True)


if __name__ == "__main__":
    main()
