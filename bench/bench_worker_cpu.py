"""CPU per document of one Kafka worker, and the bytes it leaves on the broker, for several settings.

    python bench/bench_worker_cpu.py --docs 20000 --rounds 3 \\
        --variant "zstd 3=--compression-level 3" --variant "zstd 1=--compression-level 1" \\
        --variant "jobs 2=--jobs 2"
    python bench/bench_worker_cpu.py --tree before=/tmp/base --tree after=.   # two source trees, same flags
    python bench/bench_worker_cpu.py --recrawl 2 ...   # the same documents a third time (unchanged re-crawls)
    python bench/bench_worker_cpu.py --corpus ../shared/data/20newsgroups_bydate.jsonl.gz ...   # real text

Each variant is a fresh worker of a fresh app on one broker (started by the script, see
bench_worker.py), fed the same documents as fast as they can be produced; the rounds interleave
the variants, so the machine's noise hits them alike. Reported per variant (medians over the
rounds): CPU seconds of the worker process and its children (signing processes) per document,
from the ready worker to the last document event consumed; documents/s by wall time; and the
bytes of the app's topics' record logs on the broker (events, deduped, index, changelogs).
Prints one JSON object (also written to bench/out/worker_cpu.json). On a shared machine read
the CPU column: wall time moves with the other tenants' load.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_worker import Worker, broker, corpus_docs, produce_and_consume, synth_docs, write_result

CLOCK = os.sysconf("SC_CLK_TCK")
#: Where bench_worker.broker() keeps the broker's data (its default port).
BROKER_DATA = Path("/tmp/stream-dedupe-kafka-bench-19392/data")


def cpu_seconds(pid: int) -> float:
    """User + system CPU of ``pid`` and of its live children (the signing processes)."""
    pids = [pid]
    children = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True, check=False)
    pids += [int(p) for p in children.stdout.split()]
    total = 0.0
    for p in pids:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / CLOCK
    return total


def topic_bytes(prefix: str) -> int:
    """Bytes of the record logs (``*.log`` segments; not the preallocated indexes) of the app's topics."""
    return sum(f.stat().st_size for d in BROKER_DATA.glob(f"*{prefix}*") if d.is_dir() for f in d.glob("*.log"))


def changelog_bytes(prefix: str, docs: int) -> dict[str, int]:
    """Bytes per document of each state table's changelog (``<app>-state-<table>-changelog``) on the broker."""
    dirs = BROKER_DATA.glob(f"{prefix}-app-state-*-changelog-*")  # one per topic partition: <topic>-<partition>
    tables = {d.name.split("-state-", 1)[1].rsplit("-changelog", 1)[0] for d in dirs}
    return {t: round(topic_bytes(f"{prefix}-app-state-{t}-changelog") / docs) for t in sorted(tables)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=20000, help="documents (with --corpus: its first this many)")
    parser.add_argument("--corpus", type=Path, help="a JSONL corpus (.jsonl, .jsonl.gz) instead of synth.py documents")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--variant", action="append", default=[], help='"NAME=worker flags", repeatable')
    parser.add_argument(
        "--tree", action="append", default=[], help='"NAME=PATH": run each variant on this checkout too, repeatable'
    )
    parser.add_argument(
        "--recrawl",
        type=int,
        default=0,
        metavar="N",
        help="measure the documents sent again unchanged, after N untimed passes (1: the first re-crawl; 2: one "
        "whose records are all current)",
    )
    args = parser.parse_args()
    flags = [(v.split("=", 1)[0], v.split("=", 1)[1].split()) for v in args.variant] or [("default", [])]
    trees = [(t.split("=", 1)[0], str(Path(t.split("=", 1)[1]).resolve())) for t in args.tree] or [("", None)]
    variants = [(f"{tree}/{name}" if tree else name, extra, path) for tree, path in trees for name, extra in flags]
    docs = corpus_docs(args.corpus, args.docs) if args.corpus else synth_docs(args.docs, seed=1)
    result: dict[str, Any] = {"docs": len(docs), "corpus": str(args.corpus or "synth.py"), "cpus": os.cpu_count()}
    result["runs"] = {}
    with broker(None) as bootstrap, tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for round_no in range(args.rounds):
            for name, extra, tree in variants:
                prefix = f"bc{uuid.uuid4().hex[:6]}"
                w = Worker(bootstrap, prefix, tmp, ["--batch-wait", "0.05", *extra], tree=tree)
                w.wait_ready()
                time.sleep(3.0)  # the signing processes' warm-up (spawn, kernels) and the first fetches settle
                kinds = None
                for _ in range(args.recrawl):  # untimed passes; then the same documents again: all unchanged
                    asyncio.run(produce_and_consume(bootstrap, prefix, docs, None))
                    kinds = {b'"unchanged"'}
                before = cpu_seconds(w.proc.pid)
                run = asyncio.run(produce_and_consume(bootstrap, prefix, docs, None, kinds))
                cpu = cpu_seconds(w.proc.pid) - before
                w.stop()
                row = {
                    "round": round_no,
                    "cpu_us_per_doc": round(cpu / len(docs) * 1e6, 1),
                    "docs_per_s": run["docs_per_s"],
                    "topic_bytes_per_doc": round(topic_bytes(prefix) / len(docs)),
                    "meta_changelog_bytes_per_doc": round(
                        topic_bytes(f"{prefix}-app-state-meta-changelog") / len(docs)
                    ),
                    "changelog_bytes_per_doc": changelog_bytes(prefix, len(docs)),
                    "loadavg": os.getloadavg()[0],
                }
                result["runs"].setdefault(name, []).append(row)
                print(name, row, flush=True)
    keys = ("cpu_us_per_doc", "docs_per_s", "topic_bytes_per_doc", "meta_changelog_bytes_per_doc")
    result["median"] = {
        name: {k: statistics.median(r[k] for r in rows) for k in keys} for name, rows in result["runs"].items()
    }
    write_result("worker_cpu.json", result)


if __name__ == "__main__":
    main()
