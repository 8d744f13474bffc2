"""``stream-dedupe eval``: the engine and datasketch against exact Jaccard on one corpus.

The scope is the documents long enough for near-duplicate matching (``min_tokens`` and more);
shorter ones are matched by exact text only and are left out of the pair counts (reported).
"""

from __future__ import annotations

import itertools
import time
from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import orjson

from stream_dedupe.config import DedupeParams
from stream_dedupe.core.engine import DedupeEngine
from stream_dedupe.core.minhash import MinHasher
from stream_dedupe.core.normalize import Normalizer
from stream_dedupe.core.records import parse_document
from stream_dedupe.quality.allpairs import similar_pairs
from stream_dedupe.quality.dedup_result import DedupResult
from stream_dedupe.quality.index_check import IndexCheck, index_check
from stream_dedupe.quality.metrics import PairScores, adjusted_rand_index, components, pair_scores
from stream_dedupe.storage.memory import MemoryStore


def similarity_bands(threshold: float) -> list[tuple[float, float]]:
    """Bands of width 0.05 from the threshold (rounded down) to 1.0 (the last one includes 1.0)."""
    low = int(threshold * 20 + 1e-9) / 20
    edges = [round(low + 0.05 * i, 2) for i in range(round((1.0 - low) / 0.05) + 1)]
    return [(a, b if b < 1.0 else 1.0001) for a, b in itertools.pairwise(edges)]


@dataclass
class MethodResult:
    """How one method did."""

    name: str
    scores: PairScores
    recall_by_band: dict[str, float | None]
    ari: float
    candidates_per_doc: float | None
    seconds: float
    recall_by_label: dict[str, float] = field(default_factory=dict)
    families: dict[str, int] = field(default_factory=dict)
    index: IndexCheck | None = None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        s = self.scores
        return {
            "method": self.name,
            "precision": s.precision,
            "recall": s.recall,
            "f1": s.f1,
            "true_pairs": s.true_pairs,
            "predicted_pairs": s.predicted_pairs,
            "correct_pairs": s.correct,
            "recall_by_similarity": self.recall_by_band,
            "adjusted_rand_index": self.ari,
            "candidates_per_doc": self.candidates_per_doc,
            "seconds": self.seconds,
            "recall_by_label": self.recall_by_label,
            "families": self.families,
            "index": None if self.index is None else self.index.to_json(),
        }


@dataclass
class EvalReport:
    """The evaluation of one corpus."""

    documents: int
    in_scope: int
    threshold: float
    truth_seconds: float
    methods: list[MethodResult]
    #: True when the engine ran with learned boilerplate: it verified pairs on the texts without
    #: their learned lines, while the ground truth and the index checks use the full texts.
    learned_boilerplate: bool = False

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "documents": self.documents,
            "in_scope": self.in_scope,
            "threshold": self.threshold,
            "ground_truth_seconds": self.truth_seconds,
            "learned_boilerplate": self.learned_boilerplate,
            "methods": [m.to_json() for m in self.methods],
        }


def _band_name(low: float, high: float) -> str:
    return f"{low:.2f}-{min(high, 1.0):.2f}"


@dataclass(frozen=True)
class _Truth:
    pairs: dict[tuple[int, int], float]
    size: int
    threshold: float
    labels: dict[int, tuple[str, str, bool]]
    families: list[str] | None = None


def _family_counts(families: list[str], predicted: set[tuple[int, int]]) -> dict[str, int]:
    """Predicted pairs judged by a ``family`` label (ground truth of generated corpora)."""
    members: dict[str, int] = defaultdict(int)
    for family in families:
        members[family] += 1
    within = sum(families[a] == families[b] for a, b in predicted)
    return {
        "pairs_within_families": sum(n * (n - 1) // 2 for n in members.values()),
        "found_within_families": within,
        "false_pairs_across_families": len(predicted) - within,
    }


def _score(
    name: str, truth: _Truth, predicted: set[tuple[int, int]], candidates: float | None, seconds: float
) -> MethodResult:
    by_band: dict[str, float | None] = {}
    n, labels = truth.size, truth.labels
    for low, high in similarity_bands(truth.threshold):
        inside = [p for p, j in truth.pairs.items() if low <= j < high]
        by_band[_band_name(low, high)] = (sum(p in predicted for p in inside) / len(inside)) if inside else None
    truth_labels, found_labels = components(n, truth.pairs), components(n, predicted)
    result = MethodResult(
        name,
        pair_scores(set(truth.pairs), predicted),
        by_band,
        adjusted_rand_index(truth_labels, found_labels),
        candidates,
        seconds,
    )
    if truth.families is not None:
        result.families = _family_counts(truth.families, predicted)
    if labels:
        sources = {group: i for i, (_, group, is_source) in labels.items() if is_source}
        per_label: dict[str, list[bool]] = defaultdict(list)
        for i, (label, group, is_source) in labels.items():
            if not is_source and group in sources:
                per_label[label].append(found_labels[i] == found_labels[sources[group]])
        result.recall_by_label = {k: sum(v) / len(v) for k, v in sorted(per_label.items())}
    return result


def _engine_pairs(
    params: DedupeParams, raws: list[bytes], index: dict[str, int]
) -> tuple[set[tuple[int, int]], float, DedupResult, dict[str, np.ndarray] | None]:
    """Run the engine over ``raws``.

    Returns:
        The pairs it verified (as positions in ``index``), its candidates per document, its
        decisions, and the shingle sets it compared (exact verification; else None).

    """
    store = MemoryStore()
    engine = DedupeEngine(params, store)
    for start in range(0, len(raws), 512):
        engine.process([parse_document(r, 1 << 30) for r in raws[start : start + 512]])
        engine.commit()
    groups = {doc_id: ids for _, raw in store.items("exact") for ids in [orjson.loads(raw)] for doc_id in ids}
    pairs: set[tuple[int, int]] = set()

    def link(a: str, b: str) -> None:
        if a in index and b in index and a != b:
            i, j = index[a], index[b]
            pairs.add((min(i, j), max(i, j)))

    for ids in {tuple(g) for g in groups.values()}:
        for a in ids:
            for b in ids:
                link(a, b)
    for key, raw in store.items("edges"):
        a = key.decode("utf-8")
        for b, _, _ in orjson.loads(raw):
            for x in groups.get(a, [a]):
                for y in groups.get(b, [b]):
                    link(x, y)
    docs = max(engine.counters["documents"], 1)
    compared = None
    if params.verify == "exact":
        compared = {key.decode("utf-8"): np.frombuffer(raw, dtype="<u4") for key, raw in store.items("sets")}
    return pairs, engine.counters["candidates"] / docs, DedupResult.from_store(store), compared


def evaluate(raws: list[bytes], params: DedupeParams, datasketch: bool = True) -> EvalReport:
    """Evaluate the engine (both verification modes) and datasketch's MinHashLSH on a corpus.

    Args:
        raws: The corpus, one JSON document per item (invalid ones are skipped).
        params: Engine parameters (``verify`` is overridden per method).
        datasketch: Also run ``datasketch.MinHashLSH(threshold)`` + ``query`` (unverified).

    """
    docs = [orjson.loads(r) for r in raws]
    keep = [i for i, d in enumerate(docs) if isinstance(d.get("id"), str) and isinstance(d.get("text"), str)]
    docs, raws = [docs[i] for i in keep], [raws[i] for i in keep]
    normalizer = Normalizer(params.normalization)
    buf, offsets = normalizer.normalize_batch([d["text"] for d in docs])
    hasher = MinHasher(params.num_perm, params.seed, params.shingle)
    hashes, bounds = hasher.shingle_hashes_packed(buf, offsets)
    tokens = [int(np.count_nonzero(buf[offsets[i] : offsets[i + 1]] == 32)) + 1 for i in range(len(docs))]
    scope = [i for i in range(len(docs)) if tokens[i] >= params.min_tokens and offsets[i + 1] > offsets[i]]
    index = {docs[i]["id"]: k for k, i in enumerate(scope)}
    sets = [np.unique(hashes[bounds[i] : bounds[i + 1]]) for i in scope]
    started = time.perf_counter()
    pairs = similar_pairs(sets, params.threshold)
    truth_seconds = time.perf_counter() - started
    labels = {
        k: (str(docs[i]["label"]), str(docs[i]["cluster"]), bool(docs[i].get("is_source")))
        for k, i in enumerate(scope)
        if "label" in docs[i] and "cluster" in docs[i]
    }
    families = [str(docs[i]["family"]) for i in scope] if all("family" in docs[i] for i in scope) else None
    truth = _Truth(pairs, len(scope), params.threshold, labels, families)
    sources = {d["id"]: d.get("source") for d in docs}

    def pair_threshold(a: str, b: str) -> float:
        return params.pair_threshold(sources.get(a), sources.get(b))

    methods = []
    for mode in ("estimate", "exact"):
        started = time.perf_counter()
        predicted, candidates, result, compared = _engine_pairs(replace(params, verify=mode), raws, index)
        method = _score(f"stream-dedupe verify={mode}", truth, predicted, candidates, time.perf_counter() - started)
        method.index = index_check(list(index), sets, pairs, result, params.threshold, compared, pair_threshold)
        methods.append(method)
    if datasketch:
        methods.append(_datasketch(params, buf, offsets, scope, truth))
    return EvalReport(len(docs), len(scope), params.threshold, truth_seconds, methods, params.boilerplate.learn)


def _datasketch(
    params: DedupeParams, buf: np.ndarray, offsets: np.ndarray, scope: list[int], truth: _Truth
) -> MethodResult:
    from datasketch import MinHash, MinHashLSH

    from stream_dedupe.core.shingle import shingle_hash, shingles

    started = time.perf_counter()
    texts = [bytes(buf[offsets[i] : offsets[i + 1]]).decode("utf-8") for i in scope]
    sketches = MinHash.bulk(
        [shingles(t, params.shingle) for t in texts], num_perm=params.num_perm, seed=params.seed, hashfunc=shingle_hash
    )
    lsh = MinHashLSH(threshold=params.threshold, num_perm=params.num_perm)
    predicted: set[tuple[int, int]] = set()
    candidates = 0
    for k, sketch in enumerate(sketches):
        found = lsh.query(sketch)
        candidates += len(found)
        predicted.update((j, k) for j in found)
        lsh.insert(k, sketch)
    name = f"datasketch MinHashLSH(threshold={params.threshold}), unverified"
    return _score(name, truth, predicted, candidates / max(len(scope), 1), time.perf_counter() - started)
