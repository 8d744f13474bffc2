"""``stream-dedupe retrieval-eval``: what dedup costs (or buys) a BM25 index.

The corpus is indexed twice with BM25 (``bm25s``): every document, and only the documents the
dedup run keeps (representatives and singletons). The same queries run against both; recall@k,
nDCG@k and MRR@k come from ``ir-measures`` (TREC qrels/run conventions). After dedup a relevant
document that was dropped is answered by its representative only when their exact Jaccard is at
or above the threshold (``alias="verified"``, the default) or always (``alias="any"``).
Redundancy@k is the share of filled top-k slots whose document duplicates one ranked above it:
same label (with ``label_field``), else exact Jaccard at or above the threshold.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from stream_dedupe.config import DedupeParams
from stream_dedupe.errors import ConfigError
from stream_dedupe.quality.dedup_result import DedupResult
from stream_dedupe.quality.exact import jaccard, shingle_sets
from stream_dedupe.quality.queries import Query

AliasMode = Literal["verified", "any"]

_INSTALL = "pip install 'stream-dedupe[tools]'  (or: pip install bm25s ir-measures)"


def require_tools() -> None:
    """Fail with what to install when ``bm25s`` or ``ir-measures`` is missing.

    Raises:
        ConfigError: naming the missing packages and the install command.

    """
    missing = []
    for name, module in (("bm25s", "bm25s"), ("ir-measures", "ir_measures")):
        try:
            __import__(module)
        except ImportError:
            missing.append(name)
    if missing:
        raise ConfigError(f"retrieval-eval needs {' and '.join(missing)}: {_INSTALL}")


@dataclass
class IndexScores:
    """Metrics of one index over the query set."""

    name: str
    documents: int
    recall: float
    success: float
    ndcg: float
    mrr: float
    redundancy: float
    hits: dict[str, bool] = field(repr=False, default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "index": self.name,
            "documents": self.documents,
            "recall": self.recall,
            "success": self.success,
            "ndcg": self.ndcg,
            "mrr": self.mrr,
            "redundancy": self.redundancy,
        }


@dataclass(frozen=True)
class Dropped:
    """A relevant document the dedup run dropped, with what replaced it."""

    id: str
    representative: str
    similarity: float
    representative_retrieved: bool


@dataclass(frozen=True)
class LostQuery:
    """A query answered in the top k before dedup and not after."""

    query_id: str
    query: str
    dropped: tuple[Dropped, ...]
    retrieved_after: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "query_id": self.query_id,
            "query": self.query,
            "dropped": [
                {
                    "id": d.id,
                    "representative": d.representative,
                    "similarity": round(d.similarity, 6),
                    "representative_retrieved": d.representative_retrieved,
                }
                for d in self.dropped
            ],
            "retrieved_after": list(self.retrieved_after),
        }


@dataclass
class RetrievalReport:
    """Retrieval before and after dedup on one corpus and query set."""

    documents: int
    indexed: int
    queries: int
    k: int
    threshold: float
    alias: str
    redundancy_by: str
    before: IndexScores
    after: IndexScores
    lost: list[LostQuery]
    gained: list[str]
    dropped: int = 0
    dropped_across_labels: int | None = None
    ideal: IndexScores | None = None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "documents": self.documents,
            "indexed": self.indexed,
            "queries": self.queries,
            "k": self.k,
            "threshold": self.threshold,
            "alias": self.alias,
            "redundancy_by": self.redundancy_by,
            "dropped": self.dropped,
            "dropped_across_labels": self.dropped_across_labels,
            "before": self.before.to_json(),
            "after": self.after.to_json(),
            "ideal": None if self.ideal is None else self.ideal.to_json(),
            "queries_lost": len(self.lost),
            "queries_gained": len(self.gained),
            "lost": [q.to_json() for q in self.lost],
            "gained": self.gained,
        }


class Bm25Corpus:
    """A corpus tokenized once for BM25 and searched over any subset of it (before and after dedup).

    A subset is indexed from the corpus' token ids, its vocabulary keeping the words no indexed
    document has: those add nothing to a score, so the hits and scores are bm25s' for the subset
    tokenized alone, to the bit (``tests/test_retrieval_eval.py``). Tokenizing was ~40% of
    ``retrieval-eval``'s time, done once per index.
    """

    def __init__(self, texts: list[str]) -> None:
        import bm25s

        self.size = len(texts)
        self.tokens = bm25s.tokenize(texts, stopwords="en", show_progress=False) if texts else None

    def search(self, queries: list[str], depth: int, subset: list[int] | None = None) -> list[list[tuple[int, float]]]:
        """BM25 top ``depth`` of each query over the documents ``subset`` (positions; None: all).

        Returns:
            Per query, ``(position in subset, score)`` best first, scores > 0.

        """
        import bm25s
        from bm25s.tokenization import Tokenized

        size = self.size if subset is None else len(subset)
        if not size or self.tokens is None:
            return [[] for _ in queries]
        tokens = self.tokens
        if subset is not None:
            tokens = Tokenized(ids=[tokens.ids[i] for i in subset], vocab=tokens.vocab)
        retriever = bm25s.BM25()
        retriever.index(tokens, show_progress=False)
        asked = bm25s.tokenize(queries, stopwords="en", show_progress=False, return_ids=False)
        docs, scores = retriever.retrieve(asked, k=min(depth, size), show_progress=False)
        return [
            [(int(d), float(s)) for d, s in zip(row_d, row_s, strict=True) if s > 0]
            for row_d, row_s in zip(docs, scores, strict=True)
        ]


def bm25_search(texts: list[str], queries: list[str], depth: int) -> list[list[tuple[int, float]]]:
    """BM25 top ``depth`` of each query over ``texts``: (position, score), best first, scores > 0."""
    return Bm25Corpus(texts).search(queries, depth)


class _Similarity:
    """Exact Jaccard between corpus documents, memoized."""

    def __init__(self, sets: list[np.ndarray], position: dict[str, int]) -> None:
        self.sets, self.position = sets, position
        self.cache: dict[tuple[str, str], float] = {}

    def __call__(self, a: str, b: str) -> float:
        key = (a, b) if a < b else (b, a)
        if key not in self.cache:
            self.cache[key] = jaccard(self.sets[self.position[a]], self.sets[self.position[b]])
        return self.cache[key]


def _measure(
    name: str,
    ranked: dict[str, list[tuple[str, float]]],
    qrels: dict[str, set[str]],
    k: int,
    duplicate: Any,
    documents: int,
) -> IndexScores:
    import ir_measures
    from ir_measures import RR, R, Success, nDCG

    measures = [R @ k, Success @ k, nDCG @ k, RR @ k]
    judged = {q: {d: 1 for d in rel} for q, rel in qrels.items() if rel}
    run = {q: {d: s for d, s in results} for q, results in ranked.items() if q in judged and results}
    totals = dict.fromkeys(measures, 0.0)
    hits: dict[str, bool] = dict.fromkeys(qrels, False)
    if run:
        for metric in ir_measures.iter_calc(measures, judged, run):
            totals[metric.measure] += metric.value
            if metric.measure == Success @ k and metric.value > 0:
                hits[metric.query_id] = True
    n = max(len(qrels), 1)
    slots = redundant = 0
    for results in ranked.values():
        shown: list[str] = []
        for doc_id, _ in results[:k]:
            slots += 1
            redundant += any(duplicate(doc_id, other) for other in shown)
            shown.append(doc_id)
    return IndexScores(
        name,
        documents,
        totals[R @ k] / n,
        totals[Success @ k] / n,
        totals[nDCG @ k] / n,
        totals[RR @ k] / n,
        redundant / slots if slots else 0.0,
        hits,
    )


def retrieval_eval(
    docs: list[dict[str, Any]],
    queries: list[Query],
    result: DedupResult,
    params: DedupeParams,
    k: int = 5,
    alias: AliasMode = "verified",
    label_field: str | None = None,
) -> RetrievalReport:
    """Run ``queries`` against BM25 over ``docs`` before and after the dedup ``result``.

    Args:
        docs: The corpus (objects with ``id`` and ``text``).
        queries: Queries with their relevant document ids (ids not in the corpus are ignored).
        result: What the dedup run kept and which representative replaced each dropped document.
        params: Shingles and threshold of the exact Jaccard (aliases, redundancy, lost-query detail).
        k: Cutoff of every metric.
        alias: ``verified``: a dropped document's representative answers for it only when their
            exact Jaccard reaches the threshold; ``any``: always.
        label_field: Documents with the same value of this field are duplicates for redundancy@k
            (else: exact Jaccard >= threshold).

    Raises:
        ConfigError: when ``k`` is not positive or no query has a relevant document in the corpus.

    """
    require_tools()
    if k < 1:
        raise ConfigError(f"--k must be at least 1, got {k}")
    ids = [d["id"] for d in docs]
    position = {doc_id: i for i, doc_id in enumerate(ids)}
    queries = [q for q in queries if any(d in position for d in q.relevant)]
    if not queries:
        raise ConfigError("no query has a relevant document in the corpus: check the ids of the query file")
    sets, _ = shingle_sets([d["text"] for d in docs], params)
    similarity = _Similarity(sets, position)
    threshold = params.threshold
    if label_field is not None:
        labels = {d["id"]: d.get(label_field) for d in docs}

        def duplicate(a: str, b: str) -> bool:
            return labels[a] is not None and labels[a] == labels[b]

    else:

        def duplicate(a: str, b: str) -> bool:
            return similarity(a, b) >= threshold

    kept = [i for i, doc_id in enumerate(ids) if result.indexed(doc_id)]
    texts = [d["text"] for d in docs]
    depth = k
    corpus = Bm25Corpus(texts)
    before_hits = corpus.search([q.text for q in queries], depth)
    after_hits = corpus.search([q.text for q in queries], depth, kept)
    before = {q.query_id: [(ids[i], s) for i, s in hits] for q, hits in zip(queries, before_hits, strict=True)}
    after = {q.query_id: [(ids[kept[i]], s) for i, s in hits] for q, hits in zip(queries, after_hits, strict=True)}

    def answer(doc_id: str) -> str | None:
        rep = result.representative.get(doc_id)
        if rep is None:
            return doc_id
        if rep in position and (alias == "any" or similarity(doc_id, rep) >= threshold):
            return rep
        return None

    qrels_before = {q.query_id: {d for d in q.relevant if d in position} for q in queries}
    qrels_after = {qid: {a for d in rel for a in [answer(d)] if a is not None} for qid, rel in qrels_before.items()}
    scores_before = _measure("before dedup", before, qrels_before, k, duplicate, len(ids))
    scores_after = _measure("after dedup", after, qrels_after, k, duplicate, len(kept))
    lost: list[LostQuery] = []
    gained: list[str] = []
    for q in queries:
        hit_before, hit_after = scores_before.hits[q.query_id], scores_after.hits[q.query_id]
        if hit_before and not hit_after:
            shown_after = [d for d, _ in after[q.query_id][:k]]
            found = [d for d, _ in before[q.query_id][:k] if d in qrels_before[q.query_id]]
            dropped = tuple(
                Dropped(d, rep, similarity(d, rep) if rep in position else 0.0, rep in shown_after)
                for d in found
                for rep in [result.representative.get(d)]
                if rep is not None
            )
            lost.append(LostQuery(q.query_id, q.text, dropped, tuple(shown_after)))
        elif hit_after and not hit_before:
            gained.append(q.query_id)
    report = RetrievalReport(
        len(ids),
        len(kept),
        len(queries),
        k,
        threshold,
        alias,
        "label" if label_field else "exact Jaccard",
        scores_before,
        scores_after,
        lost,
        gained,
        dropped=len(result.representative.keys() & position.keys()),
    )
    if label_field is not None:
        report.dropped_across_labels = sum(
            labels.get(d) is None or labels.get(d) != labels.get(rep)
            for d, rep in result.representative.items()
            if d in position
        )
        report.ideal = _ideal(docs, queries, qrels_before, label_field, k, duplicate)
    return report


def _ideal(
    docs: list[dict[str, Any]],
    queries: list[Query],
    qrels: dict[str, set[str]],
    label_field: str,
    k: int,
    duplicate: Any,
) -> IndexScores:
    """The index a perfect dedup would keep: the first document of each label (unlabelled: all)."""
    first: dict[Any, str] = {}
    keep: list[int] = []
    stands_for: dict[str, str] = {}
    for i, doc in enumerate(docs):
        label = doc.get(label_field)
        if label is None or label not in first:
            keep.append(i)
            if label is not None:
                first[label] = doc["id"]
        stands_for[doc["id"]] = doc["id"] if label is None else first[label]
    hits = bm25_search([docs[i]["text"] for i in keep], [q.text for q in queries], k)
    ranked = {q.query_id: [(docs[keep[i]]["id"], s) for i, s in h] for q, h in zip(queries, hits, strict=True)}
    ideal_qrels = {qid: {stands_for[d] for d in rel} for qid, rel in qrels.items()}
    return _measure("one per label (ideal)", ranked, ideal_qrels, k, duplicate, len(keep))
