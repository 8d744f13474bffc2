from __future__ import annotations

import numpy as np
import pytest
from datasketch import MinHash

from stream_dedupe.config import ShingleSpec
from stream_dedupe.core.minhash import MinHasher
from stream_dedupe.core.shingle import shingle_hash, shingles
from stream_dedupe.core.verify import estimated_jaccard, estimated_jaccards, exact_jaccard, exact_jaccards


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


@pytest.mark.parametrize("seed", range(5))
def test_one_call_over_many_sets_equals_one_call_a_set(seed: int) -> None:
    """The batched verification gives every pair exactly (float for float) what one call a pair gives."""
    rng = np.random.default_rng(seed)
    u32 = np.dtype("<u4")
    mine = np.unique(rng.integers(0, 300, 80)).astype(u32)
    sets = [np.unique(rng.integers(0, 300, int(n))).astype(u32) for n in rng.integers(0, 100, 12)]
    sets += [np.array([], u32), mine.copy(), np.array([9, 4, 7], u32)]  # empty, identical, not sorted
    raws = [s.tobytes() for s in sets]
    assert exact_jaccards(mine, raws) == [exact_jaccard(mine, s) for s in sets]
    empty = np.array([], u32)
    assert exact_jaccards(empty, raws) == [exact_jaccard(empty, s) for s in sets]
    assert exact_jaccards(mine.astype(np.int64), raws) == [exact_jaccard(mine.astype(np.int64), s) for s in sets]
    signatures = [rng.integers(0, 50, 64).astype(u32) for _ in range(7)]
    sig = signatures[0].copy()
    sig[::3] = 0
    got = estimated_jaccards(sig, [s.tobytes() for s in signatures])
    assert got == [estimated_jaccard(sig, s) for s in signatures]
    assert exact_jaccards(mine, []) == [] and estimated_jaccards(sig, []) == []


def test_batched_estimates_refuse_signatures_of_another_length() -> None:
    sig = np.zeros(64, np.dtype("<u4"))
    with pytest.raises(ValueError, match="different lengths"):
        estimated_jaccards(sig, [sig.tobytes(), sig[:32].tobytes()])
