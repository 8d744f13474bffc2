from __future__ import annotations

import numpy as np
import pytest
from datasketch import MinHash

from stream_dedupe.config import ShingleSpec
from stream_dedupe.core.minhash import MinHasher
from stream_dedupe.core.shingle import shingle_hash, shingles
from stream_dedupe.core.verify import estimated_jaccard, exact_jaccard


def test_exact_jaccard() -> None:
    a = np.array([1, 2, 3, 4], dtype=np.uint32)
    b = np.array([3, 4, 5], dtype=np.uint32)
    assert exact_jaccard(a, b) == pytest.approx(2 / 5)
    assert exact_jaccard(a, a) == 1.0
    empty = np.array([], dtype=np.uint32)
    assert exact_jaccard(empty, empty) == 1.0 and exact_jaccard(a, empty) == 0.0


def test_estimate_equals_datasketch_jaccard() -> None:
    spec = ShingleSpec("word", 3)
    texts = ["one two three four five six seven eight", "one two three four five six seven nine"]
    sigs = MinHasher(128, 1, spec).signatures([t.encode() for t in texts])
    oracle = []
    for t in texts:
        m = MinHash(num_perm=128, seed=1, hashfunc=shingle_hash)
        m.update_batch(shingles(t, spec))
        oracle.append(m)
    assert estimated_jaccard(sigs[0], sigs[1]) == oracle[0].jaccard(oracle[1])


def test_signatures_of_different_length_are_refused() -> None:
    with pytest.raises(ValueError, match="different lengths"):
        estimated_jaccard(np.zeros(64, dtype=np.uint32), np.zeros(128, dtype=np.uint32))


def test_exact_jaccard_equals_numpys_intersection() -> None:
    rng = np.random.default_rng(5)
    for _ in range(300):
        a = np.unique(rng.integers(0, 400, rng.integers(0, 120)).astype(np.uint32))
        b = np.unique(rng.integers(0, 400, rng.integers(0, 120)).astype(np.uint32))
        if a.size + b.size == 0:
            continue
        inter = np.intersect1d(a, b, assume_unique=True).size
        assert exact_jaccard(a, b) == inter / float(a.size + b.size - inter)
    unsorted = np.array([5, 1, 3], dtype=np.uint32)
    assert exact_jaccard(unsorted, np.array([1, 3, 9], dtype=np.uint32)) == pytest.approx(2 / 4)
