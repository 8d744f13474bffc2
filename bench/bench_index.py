"""The decide ("index") stage's own ceiling, beside the whole engine, in one run.

The worker splits the engine in two: every worker's sign stage normalizes, shingles and
MinHashes its input partitions; the one decide stage parses each record, decodes the signature,
looks up the LSH bands, verifies, updates the clusters and commits the state. This measures the
decide stage in isolation (no Kafka): records are signed and encoded first (not timed), then
decided in batches exactly as the worker does (``parse_document`` + ``Signer.decode`` +
``engine.process(..., signed=...)`` + ``commit``), with RocksDB state; the whole engine
(signing included) runs on the same documents in the same process for the ratio.

    python bench/bench_index.py --docs 20000 --dup-fraction 0.3 --rounds 3
    python bench/bench_index.py --no-wal   # the state written as `dedupe` writes it (no write-ahead log)
    python bench/bench_index.py --only decide_only --store memory   # the engine over dicts: what RocksDB costs
    python bench/bench_index.py --corpus ../shared/data/20newsgroups_bydate.jsonl.gz   # real text, all of it
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from synth import generate

from stream_dedupe.config import DedupeParams
from stream_dedupe.core.engine import DedupeEngine
from stream_dedupe.core.records import Document, parse_document
from stream_dedupe.core.signer import Signer
from stream_dedupe.inputs import read_lines
from stream_dedupe.storage.memory import MemoryStore
from stream_dedupe.storage.rocks import RocksStore

#: Docs/s of each decide_only run per CPU second of this process (RocksDB's threads included): on a
#: shared machine, steadier than wall time for A/B comparisons.
CPU_RATES: list[float] = []
#: Keyword arguments of every store: ``{"wal": False}`` with ``--no-wal`` (empty otherwise, so that
#: A/B runs of older commits, whose stores have no such option, still work).
STORE_OPTIONS: dict[str, Any] = {}


#: ``--store memory``: the engine over dicts (no RocksDB at all), to see what the store costs.
IN_MEMORY = False


def corpus_lines(corpus: Path | None, docs: int, dup_fraction: float) -> list[bytes]:
    """The documents to decide: every non-blank line of ``corpus`` (read as ``dedupe`` reads
    files), or ``docs`` ``synth.py`` documents."""
    if corpus is not None:
        return [item.raw for item in read_lines(str(corpus)) if item.raw.strip()]
    return [orjson.dumps(d) for d in generate(docs, 1, dup_fraction)]


def signed_wires(lines: list[bytes]) -> list[bytes | None]:
    """Each line's encoded signature, as the sign stage forwards it (None for a line that is not a document)."""
    signer = Signer(DedupeParams())
    docs = [parse_document(raw, 1 << 20) for raw in lines]
    signed = iter(signer.sign([d.text for d in docs if isinstance(d, Document)]))
    return [signer.encode(next(signed)) if isinstance(d, Document) else None for d in docs]


def decide_only(lines: list[bytes], wires: list[bytes | None], batch: int, workdir: str) -> float:
    """Docs/s of the decide stage: parse + decode signature + process + commit."""
    store: Any = MemoryStore() if IN_MEMORY else RocksStore(Path(workdir) / "decide", **STORE_OPTIONS)
    engine = DedupeEngine(DedupeParams(), store)
    engine.process([])
    started, cpu = time.perf_counter(), time.process_time()
    for i in range(0, len(lines), batch):
        records = [parse_document(raw, 1 << 20) for raw in lines[i : i + batch]]
        signed = [None if w is None else engine.signer.decode(w) for w in wires[i : i + batch]]
        engine.process(records, None, signed)
        engine.commit()
    seconds = time.perf_counter() - started
    CPU_RATES.append(len(lines) / (time.process_time() - cpu))
    # documents from which a learned boilerplate line is stripped are signed again (the footer variant)
    assert engine.counters["presigned"] >= 0.9 * engine.counters["documents"], "signatures were not used"
    if not IN_MEMORY:
        store.close()
    return len(lines) / seconds


def whole_engine(lines: list[bytes], batch: int, workdir: str) -> float:
    """Docs/s of parse + sign + decide + commit (the embedded command's engine loop)."""
    store = RocksStore(Path(workdir) / "whole", **STORE_OPTIONS)
    engine = DedupeEngine(DedupeParams(), store)
    engine.process([])
    started = time.perf_counter()
    for i in range(0, len(lines), batch):
        engine.process([parse_document(raw, 1 << 20) for raw in lines[i : i + batch]])
        engine.commit()
    seconds = time.perf_counter() - started
    store.close()
    return len(lines) / seconds


def sign_only(lines: list[bytes], batch: int) -> float:
    """Docs/s of one sign stage: parse + sign + encode (what each worker adds)."""
    signer = Signer(DedupeParams())
    signer.sign(["warm up the kernels " * 5])
    started = time.perf_counter()
    for i in range(0, len(lines), batch):
        docs = [parse_document(raw, 1 << 20) for raw in lines[i : i + batch]]
        texts = [d.text for d in docs if isinstance(d, Document)]
        [signer.encode(s) for s in signer.sign(texts)]
    return len(lines) / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=20000)
    parser.add_argument("--dup-fraction", type=float, default=0.3)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--corpus", type=Path, help="a JSONL corpus (.jsonl, .jsonl.gz) instead of synth.py (all its lines)"
    )
    parser.add_argument(
        "--no-wal", action="store_true", help="write the state without the write-ahead log, as `dedupe` over files does"
    )
    parser.add_argument(
        "--store", choices=["rocks", "memory"], default="rocks", help="memory: decide_only over dicts, no RocksDB"
    )
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument(
        "--only", choices=["decide_only", "whole_engine", "sign_only"], help="run one stage (A/B runs of commits)"
    )
    args = parser.parse_args()
    if args.no_wal:
        STORE_OPTIONS["wal"] = False
    global IN_MEMORY
    IN_MEMORY = args.store == "memory"
    lines = corpus_lines(args.corpus, args.docs, args.dup_fraction)
    args.docs = len(lines)
    wires = signed_wires(lines)
    stages = [args.only] if args.only else ["decide_only", "whole_engine", "sign_only"]
    results: dict[str, list[float]] = {stage: [] for stage in stages}
    for _ in range(args.rounds):  # interleaved: the machine's noise hits all three alike
        with tempfile.TemporaryDirectory(prefix="sd-bench-index-") as tmp:
            if "decide_only" in results:
                results["decide_only"].append(decide_only(lines, wires, args.batch, tmp))
            if "whole_engine" in results:
                results["whole_engine"].append(whole_engine(lines, args.batch, tmp))
            if "sign_only" in results:
                results["sign_only"].append(sign_only(lines, args.batch))
    summary: dict[str, Any] = {k: round(statistics.median(v)) for k, v in results.items()}
    if CPU_RATES:
        summary["decide_only_per_cpu_second"] = round(statistics.median(CPU_RATES))
    if not args.only:
        summary["decide_over_whole"] = round(summary["decide_only"] / summary["whole_engine"], 2)
    summary["rounds"] = {k: [round(x) for x in v] for k, v in results.items()}
    summary["docs"], summary["loadavg"] = args.docs, os.getloadavg()
    summary["corpus"] = str(args.corpus) if args.corpus else f"synth.py, dup fraction {args.dup_fraction}"
    print(json.dumps(summary, indent=2))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
