"""Verification of LSH candidates: a candidate below the threshold never becomes a duplicate.

A document is verified against all of its candidates at once (:func:`exact_jaccards`,
:func:`estimated_jaccards`): the candidates' stored values are joined into one array and one
kernel call measures every pair, instead of a kernel call and an array a pair (a near copy in a
large cluster has hundreds of candidates; BENCHMARKS.md, "Verification a document at a time").
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate

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


@njit(cache=True, inline="always")
def _merged(a: np.ndarray, b: np.ndarray, start: int, end: int) -> int:  # pragma: no cover - jit
    """How many values ``a`` and ``b[start:end]`` share, both strictly increasing (one merge)."""
    i, j, found = 0, start, 0
    while i < a.shape[0] and j < end:
        if a[i] == b[j]:
            found += 1
            i += 1
            j += 1
        elif a[i] < b[j]:
            i += 1
        else:
            j += 1
    return found


@njit(cache=True, pure=_sorted_intersection_pure)
def _sorted_intersection(a: np.ndarray, b: np.ndarray) -> int:  # pragma: no cover - jit
    """Size of the intersection of two strictly increasing arrays (one merge); -1 if one is not."""
    for k in range(1, a.shape[0]):
        if a[k] <= a[k - 1]:
            return -1
    for k in range(1, b.shape[0]):
        if b[k] <= b[k - 1]:
            return -1
    return _merged(a, b, 0, b.shape[0])


def _sorted_intersections_pure(a: np.ndarray, flat: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """:func:`_sorted_intersections` without numba (same answer)."""
    out = np.empty(ends.shape[0], dtype=np.int64)
    start = 0
    for i, end in enumerate(ends.tolist()):
        out[i] = _sorted_intersection_pure(a, flat[start:end])
        start = end
    return out


@njit(cache=True, pure=_sorted_intersections_pure)
def _sorted_intersections(a: np.ndarray, flat: np.ndarray, ends: np.ndarray) -> np.ndarray:  # pragma: no cover - jit
    """:func:`_sorted_intersection` of ``a`` with each of the arrays ``flat[ends[i-1]:ends[i]]`` (-1: not sorted)."""
    out = np.empty(ends.shape[0], dtype=np.int64)
    for k in range(1, a.shape[0]):
        if a[k] <= a[k - 1]:
            out[:] = -1
            return out
    start = 0
    for s in range(ends.shape[0]):
        end = ends[s]
        found = 0
        for k in range(start + 1, end):
            if flat[k] <= flat[k - 1]:
                found = -1
                break
        out[s] = _merged(a, flat, start, end) if found == 0 else found
        start = end
    return out


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


#: How the state stores shingle sets and signatures: little-endian uint32.
STORED = np.dtype("<u4")


def exact_jaccards(set_a: np.ndarray, raws: Sequence[bytes]) -> list[float]:
    """:func:`exact_jaccard` of ``set_a`` and each stored shingle set (its :data:`STORED` bytes).

    One kernel call for all of them; equal, float for float, to one :func:`exact_jaccard` a set.
    The call costs ~10 us more than one pair's (measured: it pays from about five sets on).
    """
    ends = list(accumulate(len(raw) >> 2 for raw in raws))  # 4-byte values
    flat = np.frombuffer(b"".join(raws), dtype=STORED)
    if set_a.dtype == STORED and set_a.ndim == 1:
        counts = _sorted_intersections(set_a, flat, np.array(ends, dtype=np.int64)).tolist()
    else:
        counts = [-1] * len(raws)
    size_a, start, out = int(set_a.size), 0, []
    for inter, end in zip(counts, ends, strict=True):
        if inter < 0:  # not sorted and unique: exact_jaccard's general answer
            out.append(exact_jaccard(set_a, flat[start:end]))
        elif size_a == 0 and end == start:
            out.append(1.0)
        else:
            out.append(inter / float(size_a + (end - start) - inter))
        start = end
    return out


def estimated_jaccards(sig_a: np.ndarray, raws: Sequence[bytes]) -> list[float]:
    """:func:`estimated_jaccard` of ``sig_a`` and each stored signature (its :data:`STORED` bytes).

    Raises:
        ValueError: if a stored signature has another length (another ``num_perm``).

    """
    width = sig_a.shape[0]
    for raw in raws:
        if len(raw) != width * STORED.itemsize:
            raise ValueError(
                f"signatures of different lengths {sig_a.shape} and ({len(raw) // STORED.itemsize},) cannot be compared"
            )
    flat = np.frombuffer(b"".join(raws), dtype=STORED)
    equal = np.count_nonzero(flat.reshape(len(raws), width) == sig_a, axis=1)
    return [count / float(width) for count in equal.tolist()]
