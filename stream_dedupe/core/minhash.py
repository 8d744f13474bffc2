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
    if 0 <= seed < 1 << 32:
        # RandomState(seed).randint over [0, 2**31) and [0, 2**32) with dtype uint32 keeps the low
        # 31 bits of one MT19937 draw, then takes whole draws: the same draws from the standard
        # library's MT19937 given numpy's seeding, without importing numpy.random (~10-25 ms).
        draws = np.array(_mt19937_draws(seed, 2 * num_perm), dtype=np.uint32)
        a = (draws[:num_perm] & np.uint32(0x7FFFFFFF)) * np.uint32(2) + np.uint32(1)
        return np.ascontiguousarray(a, dtype=np.uint32), np.ascontiguousarray(draws[num_perm:], dtype=np.uint32)
    gen = np.random.RandomState(seed)  # raises numpy's error for a seed out of range
    a = gen.randint(0, 1 << 31, num_perm, dtype=np.uint32) * np.uint32(2) + np.uint32(1)
    b = gen.randint(0, 1 << 32, num_perm, dtype=np.uint32)
    return np.ascontiguousarray(a, dtype=np.uint32), np.ascontiguousarray(b, dtype=np.uint32)


def _mt19937_draws(seed: int, n: int) -> list[int]:
    """The first ``n`` 32-bit outputs of MT19937 seeded like ``numpy.random.RandomState(seed)``."""
    import random

    key = [seed]
    for i in range(1, 624):
        previous = key[-1]
        key.append((1812433253 * (previous ^ (previous >> 30)) + i) & 0xFFFFFFFF)
    gen = random.Random()
    gen.setstate((3, (*key, 624), None))  # position 624: the first draw regenerates the state
    return [gen.getrandbits(32) for _ in range(n)]


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
