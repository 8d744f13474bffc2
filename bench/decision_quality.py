"""Per-document decisions against exact Jaccard, on a seeded corpus rich in pairs near the threshold.

For every document the question is: "does an earlier document have exact word-3-gram Jaccard at
or above the threshold with it?" The truth comes from an exact AllPairs join over the engine's own
shingle sets; the engine's answer is whether it stored a verified pair with an earlier document.
Each configuration runs in one process after the other on the same corpus, with RocksDB state,
and reports precision, recall, seconds and state bytes per document.

    python bench/decision_quality.py --docs 20000 --json bench/out/decision_quality.json
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from stream_dedupe.config import DedupeParams
from stream_dedupe.core.engine import DedupeEngine
from stream_dedupe.core.records import parse_document
from stream_dedupe.core.signer import Signer
from stream_dedupe.quality.allpairs import similar_pairs
from stream_dedupe.storage.rocks import RocksStore

CONFIGS: dict[str, dict[str, Any]] = {
    "estimate (old default)": {"verify": "estimate"},
    "estimate, 256 perm": {"verify": "estimate", "num_perm": 256},
    "exact (default)": {"verify": "exact"},
}


def near_threshold_corpus(n: int, seed: int, words: int = 260) -> list[dict[str, str]]:
    """Bases plus variants of earlier family members with a spread of edit rates (chains included).

    An edit rate r of scattered word substitutions gives word-3-gram Jaccard about
    (1 - 3r) / (1 + 3r): rates in [0.01, 0.09] put most pairs between 0.58 and 0.94.
    """
    rng = random.Random(seed)
    vocab = [f"t{i}" for i in range(20000)]
    families: list[list[list[str]]] = []
    out = []
    for i in range(n):
        if families and rng.random() < 0.45:
            family = rng.choice(families)
            words_of = list(rng.choice(family))
            rate = rng.uniform(0.01, 0.09)
            for _ in range(max(1, int(rate * len(words_of)))):
                words_of[rng.randrange(len(words_of))] = rng.choice(vocab)
            family.append(words_of)
        else:
            words_of = [rng.choice(vocab) for _ in range(words)]
            families.append([words_of])
        out.append({"id": f"d{i:06d}", "text": " ".join(words_of)})
    return out


def truth(docs: list[dict[str, str]], threshold: float) -> np.ndarray:
    """Per document: True if an earlier document has exact Jaccard >= threshold with it."""
    signer = Signer(DedupeParams(verify="exact"))
    sets = [
        s.shingle_set if s.shingle_set is not None else np.zeros(0, np.uint32)
        for s in signer.sign([d["text"] for d in docs])
    ]
    has = np.zeros(len(docs), dtype=bool)
    for _, j in similar_pairs(sets, threshold):
        has[j] = True
    return has


def run(docs: list[dict[str, str]], overrides: dict[str, Any], batch: int = 512) -> tuple[np.ndarray, float, float]:
    """Decisions (verified pair with an earlier document), seconds, state bytes per document."""
    params = DedupeParams(**overrides)
    raws = [orjson.dumps(d) for d in docs]
    tmp = Path(tempfile.mkdtemp(prefix="sd-dq-"))
    try:
        store = RocksStore(tmp / "state")
        engine = DedupeEngine(params, store)
        start = time.perf_counter()
        for i in range(0, len(raws), batch):
            engine.process([parse_document(r, 1 << 20) for r in raws[i : i + batch]])
            engine.commit()
        seconds = time.perf_counter() - start
        position = {d["id"]: i for i, d in enumerate(docs)}
        found = np.zeros(len(docs), dtype=bool)
        for key, raw in store.items("edges"):
            mine = position[key.decode()]
            if any(position[other] < mine for other, _, _ in orjson.loads(raw)):
                found[mine] = True
        store.close()
        size = sum(p.stat().st_size for p in (tmp / "state").rglob("*") if p.is_file() and "LOG" not in p.name)
        return found, seconds, size / len(docs)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--threshold", type=float, default=0.8)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    docs = near_threshold_corpus(args.docs, args.seed)
    expected = truth(docs, args.threshold)
    rows = []
    for name, overrides in CONFIGS.items():
        found, seconds, per_doc = run(docs, {"threshold": args.threshold, **overrides})
        tp = int(np.sum(found & expected))
        precision = tp / max(1, int(found.sum()))
        recall = tp / max(1, int(expected.sum()))
        rows.append(
            {
                "config": name,
                "precision": precision,
                "recall": recall,
                "seconds": seconds,
                "state_bytes_per_doc": per_doc,
                "decided_duplicate": int(found.sum()),
            }
        )
    print(f"{args.docs} documents, {int(expected.sum())} with an earlier document at exact J >= {args.threshold}\n")
    print("| configuration | precision | recall | seconds | state B/doc |\n|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['config']} | {r['precision']:.4f} | {r['recall']:.4f} | {r['seconds']:.1f} "
            f"| {r['state_bytes_per_doc']:.0f} |"
        )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"docs": args.docs, "seed": args.seed, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
