"""Embedded engine vs datasketch on the same ~1.7 KB documents, side by side in one run.

Both pipelines start from JSON lines and end with a decision per document (new or duplicate-of
an earlier document, verified at the threshold):

* stream-dedupe: ``stream_dedupe.embedded.run`` (the ``dedupe`` command's loop) with RocksDB
  state on disk and events written to a file;
* datasketch: JSON parse, the same normalization and word shingles, ``MinHash.bulk`` (once with
  the same MurmurHash3 shingle hash, once with datasketch's default SHA-1), ``MinHashLSH`` at
  the same threshold, ``query`` then ``insert``, and a ``jaccard`` check of each candidate (in
  memory, no state on disk).

Pair recall is measured against the generator's families (a document is counted as found
when it is decided duplicate-of a member of its own family).

    python bench/bench_embedded.py --docs 20000
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from synth import generate

from stream_dedupe.config import DedupeParams, RuntimeLimits
from stream_dedupe.core.engine import DedupeEngine
from stream_dedupe.core.normalize import Normalizer
from stream_dedupe.core.shingle import shingle_hash, shingles
from stream_dedupe.embedded import run
from stream_dedupe.storage.memory import MemoryStore
from stream_dedupe.storage.rocks import RocksStore


def bench_engine(path: Path, workdir: Path, families: dict[str, str]) -> dict[str, float]:
    store = RocksStore(workdir / "state")
    engine = DedupeEngine(DedupeParams(), store, RuntimeLimits())
    with open(workdir / "events.jsonl", "wb") as out:
        started = time.perf_counter()
        result = run(engine, [str(path)], out, 512, 1 << 20)
        seconds = time.perf_counter() - started
    store.close()  # flushes the memtables: the write-ahead log no longer counts as state
    state_bytes = sum(f.stat().st_size for f in (workdir / "state").rglob("*") if f.is_file())
    found = 0
    for line in (workdir / "events.jsonl").read_bytes().splitlines():
        e = orjson.loads(line)
        if e["event"] == "duplicate-of" and families[e["id"]] == families[e["of"]]:
            found += 1
    return {
        "seconds": seconds,
        "docs_per_s": result.lines / seconds,
        "duplicates": result.counters["duplicate-of"],
        "correct_duplicates": found,
        "state_bytes_per_doc": state_bytes / result.lines,
    }


def bench_datasketch(path: Path, families: dict[str, str], threshold: float, hashfunc: Any) -> dict[str, float]:
    from datasketch import MinHash, MinHashLSH

    normalizer = Normalizer()
    params = DedupeParams()
    lsh = MinHashLSH(threshold=threshold, num_perm=params.num_perm)
    started = time.perf_counter()
    duplicates = found = lines = 0
    batch: list[tuple[str, list[bytes]]] = []

    def decide() -> None:
        nonlocal duplicates, found
        sketches = MinHash.bulk(
            [s for _, s in batch], num_perm=params.num_perm, seed=params.seed, hashfunc=shingle_hash
        )
        for (doc_id, _), m in zip(batch, sketches, strict=True):
            best = max(
                (c for c in lsh.query(m) if sigs[c].jaccard(m) >= threshold),
                default=None,
                key=lambda c: sigs[c].jaccard(m),
            )
            if best is not None:
                duplicates += 1
                found += families[doc_id] == families[best]
            lsh.insert(doc_id, m)
            sigs[doc_id] = m
        batch.clear()

    sigs: dict[str, MinHash] = {}
    with open(path, "rb") as fh:
        for line in fh:
            lines += 1
            doc = orjson.loads(line)
            batch.append((doc["id"], shingles(normalizer.normalize(doc["text"]), params.shingle)))
            if len(batch) == 512:
                decide()
    decide()
    seconds = time.perf_counter() - started
    return {"seconds": seconds, "docs_per_s": lines / seconds, "duplicates": duplicates, "correct_duplicates": found}


def _corpus(path: Path, docs: int, seed: int, dup_fraction: float) -> tuple[dict[str, str], int]:
    families: dict[str, str] = {}
    true_dups = 0
    seen: set[str] = set()
    with open(path, "wb") as fh:
        for doc in generate(docs, seed, dup_fraction):
            families[str(doc["id"])] = str(doc["family"])
            true_dups += doc["family"] in seen
            seen.add(str(doc["family"]))
            fh.write(orjson.dumps(doc) + b"\n")
    return families, true_dups


def main() -> None:
    parser = argparse.ArgumentParser(description="embedded engine vs datasketch, same documents, one run")
    parser.add_argument("--docs", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--dup-fraction", type=float, default=0.3)
    parser.add_argument("--repeat", type=int, default=3, help="rounds; each runs every pipeline once, interleaved")
    parser.add_argument("--skip-datasketch", action="store_true")
    parser.add_argument("--out", default="bench/out/embedded.json")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="sd-bench-"))
    try:
        path = workdir / "corpus.jsonl"
        families, true_dups = _corpus(path, args.docs, args.seed, args.dup_fraction)
        # warm-up: load the compiled kernels from numba's cache outside the timed region
        DedupeEngine(DedupeParams(), MemoryStore()).process([])
        from datasketch.hashfunc import sha1_hash32

        threshold = DedupeParams().threshold
        rounds: list[dict[str, dict[str, float]]] = []
        for round_number in range(args.repeat):
            run_dir = workdir / f"round{round_number}"
            run_dir.mkdir()
            result = {"engine": bench_engine(path, run_dir, families)}
            if not args.skip_datasketch:
                result["datasketch_murmur3"] = bench_datasketch(path, families, threshold, shingle_hash)
                result["datasketch_sha1"] = bench_datasketch(path, families, threshold, sha1_hash32)
            rounds.append(result)
        report: dict[str, object] = {
            "docs": args.docs,
            "dup_fraction": args.dup_fraction,
            "bytes_per_doc": round(path.stat().st_size / args.docs),
            "true_duplicates": true_dups,
            "python": platform.python_version(),
            "rounds": rounds,
        }
        for name in rounds[0]:
            report[f"{name}_docs_per_s_median"] = statistics.median(r[name]["docs_per_s"] for r in rounds)
        if not args.skip_datasketch:
            for base in ("datasketch_murmur3", "datasketch_sha1"):
                ratios = [r["engine"]["docs_per_s"] / r[base]["docs_per_s"] for r in rounds]
                report[f"speedup_vs_{base}_per_round"] = [round(x, 2) for x in ratios]
                report[f"speedup_vs_{base}_median"] = statistics.median(ratios)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=2))
        print(json.dumps({k: v for k, v in report.items() if k != "rounds"}, indent=2))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
