"""Per-phase cost of the engine (microseconds per document), RocksDB or in-memory state.

python bench/phases.py --docs 20000 --dup-fraction 0.3 [--memory]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from synth import generate

from stream_dedupe.config import DedupeParams
from stream_dedupe.core.engine import DedupeEngine
from stream_dedupe.core.records import parse_document
from stream_dedupe.storage.base import KVStore
from stream_dedupe.storage.memory import MemoryStore
from stream_dedupe.storage.rocks import RocksStore


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=20000)
    parser.add_argument("--dup-fraction", type=float, default=0.3)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--memory", action="store_true", help="in-memory state instead of RocksDB")
    args = parser.parse_args()
    lines = [orjson.dumps(d) for d in generate(args.docs, 1, args.dup_fraction)]
    store: KVStore = MemoryStore() if args.memory else RocksStore(tempfile.mkdtemp(prefix="sd-phases-"))
    engine = DedupeEngine(DedupeParams(), store)
    engine.process([])  # load the compiled kernels outside the timed region
    timings = dict.fromkeys(("parse", "prepare", "decide", "commit", "events"), 0.0)
    prepare = engine._prepare

    def timed_prepare(docs):  # type: ignore[no-untyped-def]
        started = time.perf_counter()
        result = prepare(docs)
        timings["prepare"] += time.perf_counter() - started
        return result

    engine._prepare = timed_prepare  # type: ignore[method-assign]
    started_all = time.perf_counter()
    for start in range(0, len(lines), args.batch):
        t = time.perf_counter()
        records = [parse_document(line, 1 << 20) for line in lines[start : start + args.batch]]
        timings["parse"] += time.perf_counter() - t
        t = time.perf_counter()
        events = engine.process(records)
        timings["decide"] += time.perf_counter() - t
        t = time.perf_counter()
        b"".join(orjson.dumps(e) + b"\n" for e in events)
        timings["events"] += time.perf_counter() - t
        t = time.perf_counter()
        engine.commit()
        timings["commit"] += time.perf_counter() - t
    total = time.perf_counter() - started_all
    timings["decide"] -= timings["prepare"]
    report = {k: round(v / len(lines) * 1e6, 1) for k, v in timings.items()}
    print(orjson.dumps({"us_per_doc": report, "docs_per_s": round(len(lines) / total)}).decode())


if __name__ == "__main__":
    main()
