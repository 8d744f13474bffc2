"""Verification of LSH candidates: a candidate below the threshold never becomes a duplicate."""

from __future__ import annotations

import numpy as np

from stream_dedupe.core.jit import njit


def estimated_jaccard(sig_a: np.ndarray, sig_b: np.ndarray) -> float:
    """MinHash estimate of Jaccard similarity: the fraction of equal signature positions.

    Raises:
        ValueError: if the signatures have different lengths (different ``num_perm``).

    """
    if sig_a.shape != sig_b.shape:
        raise ValueError(f"signatures of different lengths {sig_a.shape} and {sig_b.shape} cannot be compared")
    return float(np.count_nonzero(sig_a == sig_b)) / float(sig_a.shape[0])


def _sorted_intersection_pure(a: np.ndarray, b: np.ndarray) -> int:
    """:func:`_sorted_intersection` without numba (same answer)."""
    if bool(np.any(a[1:] <= a[:-1])) or bool(np.any(b[1:] <= b[:-1])):
        return -1
    return int(np.intersect1d(a, b, assume_unique=True).size)


@njit(cache=True, pure=_sorted_intersection_pure)
def _sorted_intersection(a: np.ndarray, b: np.ndarray) -> int:  # pragma: no cover - jit
    """Size of the intersection of two strictly increasing arrays (one merge); -1 if one is not."""
    i = j = found = 0
    for k in range(1, a.shape[0]):
        if a[k] <= a[k - 1]:
            return -1
    for k in range(1, b.shape[0]):
        if b[k] <= b[k - 1]:
            return -1
    while i < a.shape[0] and j < b.shape[0]:
        if a[i] == b[j]:
            found += 1
            i += 1
            j += 1
        elif a[i] < b[j]:
            i += 1
        else:
            j += 1
    return found


def exact_jaccard(set_a: np.ndarray, set_b: np.ndarray) -> float:
    """Exact Jaccard similarity of two sorted arrays of unique shingle hashes."""
    if set_a.size == 0 and set_b.size == 0:
        return 1.0
    inter = -1
    if set_a.dtype == set_b.dtype and set_a.ndim == set_b.ndim == 1:
        inter = int(_sorted_intersection(set_a, set_b))
    if inter < 0:  # not sorted and unique (or mixed types): numpy's general answer
        inter = np.intersect1d(set_a, set_b, assume_unique=True).size
    return inter / float(set_a.size + set_b.size - inter)
