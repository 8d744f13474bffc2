"""Batched MinHash signatures, bit-identical to ``datasketch.MinHash`` (scheme ``affine32``)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from stream_dedupe.config import ShingleSpec
from stream_dedupe.core import kernels
from stream_dedupe.core.shingle import SHINGLE_HASH_SEED


def datasketch_permutations(num_perm: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``(a, b)`` permutation parameters datasketch derives from ``seed``, as uint32 arrays.

    The same draws as ``datasketch.MinHash(num_perm, seed, scheme="affine32").permutations``
    (datasketch 2.0, ``MinHash._init_permutations``), made here with numpy alone: importing
    datasketch pulls in scipy, about half a second of every start-up. ``a`` is odd (a bijection
    modulo 2**32), ``b`` any 32-bit value; ``tests/test_minhash.py`` checks them against datasketch.
    """
    gen = np.random.RandomState(seed)
    a = gen.randint(0, 1 << 31, num_perm, dtype=np.uint32) * np.uint32(2) + np.uint32(1)
    b = gen.randint(0, 1 << 32, num_perm, dtype=np.uint32)
    return np.ascontiguousarray(a, dtype=np.uint32), np.ascontiguousarray(b, dtype=np.uint32)


def pack(texts: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate UTF-8 texts into one byte buffer with offsets (the kernels' input)."""
    offsets = np.zeros(len(texts) + 1, dtype=np.int64)
    if texts:
        np.cumsum([len(t) for t in texts], out=offsets[1:])
    buf = np.frombuffer(b"".join(texts), dtype=np.uint8) if texts else np.zeros(0, dtype=np.uint8)
    return buf, offsets


class MinHasher:
    """Computes shingle hashes and MinHash signatures for batches of normalized texts.

    Args:
        num_perm: Number of permutations.
        seed: datasketch seed of the permutations.
        shingle: Shingling of the normalized text.

    """

    def __init__(self, num_perm: int, seed: int, shingle: ShingleSpec) -> None:
        self.num_perm = num_perm
        self.seed = seed
        self.shingle = shingle
        self._a, self._b = datasketch_permutations(num_perm, seed)
        self._kind = kernels.WORD if shingle.kind == "word" else kernels.CHAR

    def shingle_hashes(self, texts: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray]:
        """Per-document shingle hashes (in order, with repeats) and their bounds."""
        return self.shingle_hashes_packed(*pack(texts))

    def shingle_hashes_packed(self, buf: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`shingle_hashes` of texts already packed by :func:`pack`."""
        hashes, bounds = kernels.shingle_hashes(buf, offsets, self._kind, self.shingle.size, SHINGLE_HASH_SEED)
        return hashes, bounds

    def signatures(self, texts: Sequence[bytes]) -> np.ndarray:
        """``(len(texts), num_perm)`` uint32 signatures of UTF-8 normalized texts."""
        hashes, bounds = self.shingle_hashes(texts)
        return self.signatures_from_hashes(hashes, bounds)

    def signatures_from_hashes(self, hashes: np.ndarray, bounds: np.ndarray) -> np.ndarray:
        """Signatures from the output of :meth:`shingle_hashes`."""
        out: np.ndarray = kernels.minhash_signatures(hashes, bounds, self._a, self._b)
        return out
