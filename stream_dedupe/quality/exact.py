"""Exact shingle sets of documents, as the engine sees them (normalized, same shingles)."""

from __future__ import annotations

import numpy as np

from stream_dedupe.config import DedupeParams
from stream_dedupe.core.minhash import MinHasher
from stream_dedupe.core.normalize import Normalizer
from stream_dedupe.core.verify import exact_jaccard


def shingle_sets(texts: list[str], params: DedupeParams) -> tuple[list[np.ndarray], list[int]]:
    """Sorted unique shingle hashes and the token count of each text.

    The texts are normalized with ``params.normalization`` and cut with ``params.shingle``, so a
    Jaccard on these sets is the engine's exact Jaccard (learned boilerplate is *not* stripped:
    the ground truth is the text as it came in).
    """
    if not texts:
        return [], []
    buf, offsets = Normalizer(params.normalization).normalize_batch(texts)
    hashes, bounds = MinHasher(params.num_perm, params.seed, params.shingle).shingle_hashes_packed(buf, offsets)
    sets = [np.unique(hashes[bounds[i] : bounds[i + 1]]) for i in range(len(texts))]
    tokens = [
        int(np.count_nonzero(buf[offsets[i] : offsets[i + 1]] == 32)) + 1 if offsets[i + 1] > offsets[i] else 0
        for i in range(len(texts))
    ]
    return sets, tokens


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """Exact Jaccard of two shingle sets (two empty sets are identical)."""
    return exact_jaccard(a, b)
