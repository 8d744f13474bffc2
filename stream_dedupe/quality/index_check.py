"""Two label-free checks of what a dedup run left in the index, against exact Jaccard.

* **Residual duplicates**: pairs of indexed documents whose exact Jaccard is at or above the
  threshold (redundancy the run left behind). These are the exact-join pairs (AllPairs, see
  :mod:`stream_dedupe.quality.allpairs`) restricted to the kept set.
* **Loss**: dropped documents whose exact Jaccard to their representative (the indexed document
  that replaces them) is below the threshold: documents the index no longer covers.
"""

from __future__ import annotations

from collections.abc import Mapping
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

    """

    kept: int
    dropped: int
    residual_pairs: int
    residual_documents: int
    lost: int
    largest_component: int
    largest_cover: int
    lost_examples: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "kept": self.kept,
            "dropped": self.dropped,
            "residual_duplicate_pairs": self.residual_pairs,
            "residual_duplicate_documents": self.residual_documents,
            "lost": self.lost,
            "lost_examples": self.lost_examples,
            "largest_component": self.largest_component,
            "largest_cover": self.largest_cover,
        }


def index_check(
    ids: list[str],
    sets: list[np.ndarray],
    truth: Mapping[tuple[int, int], float],
    result: DedupResult,
    threshold: float,
) -> IndexCheck:
    """Check a dedup result over the documents ``ids`` (the scope of the exact ground truth).

    Args:
        ids: Document ids; position ``i`` has the shingle set ``sets[i]``.
        sets: Exact shingle sets.
        truth: Every pair ``(i, j)`` of positions with exact Jaccard >= ``threshold``.
        result: The dedup run's decisions.
        threshold: The decision threshold.

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
    return IndexCheck(
        kept=sum(kept),
        dropped=len(ids) - sum(kept),
        residual_pairs=len(residual),
        residual_documents=len({i for pair in residual for i in pair}),
        lost=lost_count,
        largest_component=max(result.cluster_sizes().values(), default=1),
        largest_cover=max(result.cover_sizes().values(), default=1),
        lost_examples=lost,
    )
