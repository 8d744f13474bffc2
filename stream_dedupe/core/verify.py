"""Verification of LSH candidates: a candidate below the threshold never becomes a duplicate."""

from __future__ import annotations

import numpy as np


def estimated_jaccard(sig_a: np.ndarray, sig_b: np.ndarray) -> float:
    """MinHash estimate of Jaccard similarity: the fraction of equal signature positions.

    Raises:
        ValueError: if the signatures have different lengths (different ``num_perm``).

    """
    if sig_a.shape != sig_b.shape:
        raise ValueError(f"signatures of different lengths {sig_a.shape} and {sig_b.shape} cannot be compared")
    return float(np.count_nonzero(sig_a == sig_b)) / float(sig_a.shape[0])


def exact_jaccard(set_a: np.ndarray, set_b: np.ndarray) -> float:
    """Exact Jaccard similarity of two sorted arrays of unique shingle hashes."""
    if set_a.size == 0 and set_b.size == 0:
        return 1.0
    inter = np.intersect1d(set_a, set_b, assume_unique=True).size
    return inter / float(set_a.size + set_b.size - inter)
