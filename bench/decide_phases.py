"""Where the decide stage's time goes: wall time per phase of ``bench_index.decide_only``.

Wraps the engine's phase functions with ``time.perf_counter`` (no profiler overhead on the
rest) and runs the decide-only loop of ``bench/bench_index.py`` once. Nested phases are indented;
a phase's time includes its children's.

    python bench/decide_phases.py --docs 20000
    python bench/decide_phases.py --docs 20000 --cache-entries 200000   # committed values kept between batches
    python bench/decide_phases.py --corpus ../shared/data/20newsgroups_bydate.jsonl.gz   # a JSONL corpus, all of it
    python bench/decide_phases.py --no-wal   # the state written as `dedupe` over files writes it
"""

from __future__ import annotations

import argparse
import functools
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_index

import stream_dedupe.core.engine as engine_module
from stream_dedupe.core.batch import BatchPreparer
from stream_dedupe.core.boilerplate import BoilerplateLearner
from stream_dedupe.core.engine import DedupeEngine
from stream_dedupe.storage.rocks import RocksStore
from stream_dedupe.storage.state import StateView

TIMES: Counter[str] = Counter()
PHASES: list[tuple[Any, str, str]] = [
    (DedupeEngine, "process", "engine.process"),
    (BatchPreparer, "strip_boilerplate", "  strip and count boilerplate"),
    (BoilerplateLearner, "batch_lines", "    lines and their keys"),
    (BoilerplateLearner, "prefetch_counts", "    prefetch the counts (filter, multi-get)"),
    (BoilerplateLearner, "strip_and_count", "    strip and count"),
    (BatchPreparer, "keyed", "  identity keys, band hashes"),
    (BatchPreparer, "prefetch_neighbours", "  prefetch for the exact path (multi-gets)"),
    (engine_module, "classify", "  fast path: classify"),
    (engine_module, "decide_new", "  fast path: decide_new"),
    (DedupeEngine, "_decide", "  exact path: _decide"),
    (engine_module, "near_matches", "    candidates + verification"),
    (DedupeEngine, "_join", "    union-find + edges"),
    (engine_module, "update_cover", "    cover update"),
    (engine_module, "resign_carriers", "  boilerplate carriers signed again"),
    (StateView, "commit", "commit (RocksDB write batch)"),
    (RocksStore, "write", "  RocksStore.write (WriteBatch puts + write)"),
    (RocksStore, "get_many", "RocksStore.get_many (every multi-get, in the phases above)"),
    (bench_index, "parse_document", "parse_document"),
]


def _wrap(owner: Any, name: str, label: str) -> None:
    inner = getattr(owner, name, None)
    if inner is None:  # an older engine (A/B runs against earlier commits)
        return

    @functools.wraps(inner)
    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            TIMES[label] += time.perf_counter() - started

    setattr(owner, name, timed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=20000)
    parser.add_argument("--dup-fraction", type=float, default=0.3)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument(
        "--corpus", type=Path, help="a JSONL corpus (.jsonl, .jsonl.gz) instead of synth.py (all its lines)"
    )
    parser.add_argument("--cache-entries", type=int, default=None, help="StateView cache bound (default: the engine's)")
    parser.add_argument("--no-wal", action="store_true", help="no write-ahead log, as `dedupe` over files writes")
    args = parser.parse_args()
    if args.no_wal:
        bench_index.STORE_OPTIONS["wal"] = False
    if args.cache_entries is not None and hasattr(StateView, "resize_cache"):
        engine_init = DedupeEngine.__init__

        def init(self: DedupeEngine, *a: Any, **k: Any) -> None:
            engine_init(self, *a, **k)
            self.state.resize_cache(args.cache_entries)

        DedupeEngine.__init__ = init  # type: ignore[method-assign]
    lines = bench_index.corpus_lines(args.corpus, args.docs, args.dup_fraction)
    args.docs = len(lines)
    wires = bench_index.signed_wires(lines)
    with tempfile.TemporaryDirectory(prefix="sd-bench-phases-") as tmp:
        bench_index.decide_only(lines[:500], wires[:500], args.batch, tmp + "/warm")  # load the kernels
    for owner, name, label in PHASES:
        _wrap(owner, name, label)
    with tempfile.TemporaryDirectory(prefix="sd-bench-phases-") as tmp:
        started = time.perf_counter()
        rate = bench_index.decide_only(lines, wires, args.batch, tmp)
        wall = time.perf_counter() - started
    print(f"decide only: {rate:,.0f} docs/s ({wall:.2f} s wall, {1e6 / rate:.1f} us/doc)")
    print("| phase | s | us/doc |\n|---|---|---|")
    for _, _, label in PHASES:
        seconds = TIMES[label]
        print(f"| {label.replace('  ', '&nbsp;&nbsp;')} | {seconds:.3f} | {seconds / args.docs * 1e6:.1f} |")


if __name__ == "__main__":
    main()
