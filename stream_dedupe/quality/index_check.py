"""Two label-free checks of what a dedup run left in the index, against exact Jaccard.

* **Residual duplicates**: pairs of indexed documents whose exact Jaccard is at or above the
  threshold (redundancy the run left behind). These are the exact-join pairs (AllPairs, see
  :mod:`stream_dedupe.quality.allpairs`) restricted to the kept set.
* **Loss**: dropped documents whose exact Jaccard to their representative (the indexed document
  that replaces them) is below the threshold: documents the index no longer covers. Measured on
  the full texts, and, when the run's own shingle sets are given, on the texts the engine
  compared (without their learned boilerplate lines): there it must be 0 with exact verification,
  whatever was learned, since a document is dropped only for a verified-similar representative.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from stream_dedupe.quality.dedup_result import DedupResult
from stream_dedupe.quality.exact import jaccard

#: Lost documents listed in a report (the count covers all of them).
EXAMPLES = 10


@dataclass
class IndexCheck:
    """Residual duplicates, loss and the largest groups of one dedup run.

    Attributes:
        kept: Documents in scope that stay indexed.
        dropped: Documents in scope that were dropped.
        residual_pairs: Pairs of kept documents with exact Jaccard >= threshold.
        residual_documents: Kept documents in at least one residual pair.
        lost: Dropped documents whose exact Jaccard to their representative is below threshold.
        lost_examples: The first lost documents: id, representative, similarity.
        largest_component: Members of the largest union-find cluster.
        largest_cover: Most documents one representative stands for (itself included).
        lost_as_compared: Dropped documents below the threshold against their representative on
            the shingle sets the engine compared (None when those were not given).

    """

    kept: int
    dropped: int
    residual_pairs: int
    residual_documents: int
    lost: int
    largest_component: int
    largest_cover: int
    lost_examples: list[dict[str, Any]] = field(default_factory=list)
    lost_as_compared: int | None = None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "kept": self.kept,
            "dropped": self.dropped,
            "residual_duplicate_pairs": self.residual_pairs,
            "residual_duplicate_documents": self.residual_documents,
            "lost": self.lost,
            "lost_examples": self.lost_examples,
            "lost_as_compared": self.lost_as_compared,
            "largest_component": self.largest_component,
            "largest_cover": self.largest_cover,
        }


def index_check(
    ids: list[str],
    sets: list[np.ndarray],
    truth: Mapping[tuple[int, int], float],
    result: DedupResult,
    threshold: float,
    compared: Mapping[str, np.ndarray] | None = None,
    pair_threshold: Callable[[str, str], float] | None = None,
) -> IndexCheck:
    """Check a dedup result over the documents ``ids`` (the scope of the exact ground truth).

    Args:
        ids: Document ids; position ``i`` has the shingle set ``sets[i]``.
        sets: Exact shingle sets.
        truth: Every pair ``(i, j)`` of positions with exact Jaccard >= ``threshold``.
        result: The dedup run's decisions.
        threshold: The decision threshold.
        compared: The shingle sets the run compared, by id (its state's, exact verification):
            for :attr:`IndexCheck.lost_as_compared`. A dropped document or representative
            without one counts as lost.
        pair_threshold: The threshold that decided a pair ``(document, representative)`` in the
            run (per-source thresholds), for the ``compared`` check; default ``threshold``.

    """
    position = {doc_id: i for i, doc_id in enumerate(ids)}
    kept = [result.indexed(doc_id) for doc_id in ids]
    residual = [(i, j) for i, j in truth if kept[i] and kept[j]]
    lost: list[dict[str, Any]] = []
    lost_count = 0
    for i, doc_id in enumerate(ids):
        rep = result.representative.get(doc_id)
        if rep is None:
            continue
        similarity = jaccard(sets[i], sets[position[rep]]) if rep in position else 0.0
        if similarity < threshold:
            lost_count += 1
            if len(lost) < EXAMPLES:
                lost.append({"id": doc_id, "representative": rep, "similarity": round(similarity, 6)})
    lost_as_compared = None
    if compared is not None:
        lost_as_compared = 0
        for doc_id in ids:
            rep = result.representative.get(doc_id)
            if rep is None:
                continue
            mine, theirs = compared.get(doc_id), compared.get(rep)
            needed = threshold if pair_threshold is None else pair_threshold(doc_id, rep)
            if mine is None or theirs is None or jaccard(mine, theirs) < needed:
                lost_as_compared += 1
    return IndexCheck(
        kept=sum(kept),
        dropped=len(ids) - sum(kept),
        residual_pairs=len(residual),
        residual_documents=len({i for pair in residual for i in pair}),
        lost=lost_count,
        largest_component=max(result.cluster_sizes().values(), default=1),
        largest_cover=max(result.cover_sizes().values(), default=1),
        lost_examples=lost,
        lost_as_compared=lost_as_compared,
    )
