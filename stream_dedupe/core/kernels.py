"""Compiled (numba) kernels: shingle enumeration, MurmurHash3 and MinHash in one pass.

Why our own code instead of ``datasketch.MinHash.bulk``: datasketch hashes every shingle with a
Python call and builds a ``(shingles x num_perm)`` numpy matrix per document; this kernel walks
the UTF-8 bytes once per batch and keeps the running minimum in registers, which measured about
30x faster on ~1.7 KB documents (see BENCHMARKS.md). The result is bit-identical to
``datasketch.MinHash(num_perm, seed, hashfunc=shingle_hash)`` (scheme ``affine32``), which
``tests/test_minhash.py`` checks with datasketch as the oracle.

numba is imported only when a batch is big enough to repay it (:mod:`stream_dedupe.core.jit`);
until then each kernel runs its pure numpy/mmh3 twin in :mod:`stream_dedupe.core.pure_kernels`,
which gives the same values bit for bit (``tests/test_pure_kernels.py``).
"""

from __future__ import annotations

import numpy as np

from stream_dedupe.core import pure_kernels as pure
from stream_dedupe.core.jit import njit

WORD = 0
CHAR = 1

_C1 = np.uint32(0xCC9E2D51)
_C2 = np.uint32(0x1B873593)
_M32 = 0xFFFFFFFF


@njit(cache=True, inline="always")
def _rotl32(x: np.uint32, r: int) -> np.uint32:
    return np.uint32(((x << np.uint32(r)) | (x >> np.uint32(32 - r))) & _M32)


@njit(cache=True, inline="always")
def _fmix32(h: np.uint32) -> np.uint32:
    h = np.uint32(h ^ (h >> np.uint32(16)))
    h = np.uint32((h * np.uint32(0x85EBCA6B)) & _M32)
    h = np.uint32(h ^ (h >> np.uint32(13)))
    h = np.uint32((h * np.uint32(0xC2B2AE35)) & _M32)
    return np.uint32(h ^ (h >> np.uint32(16)))


@njit(cache=True, inline="always", pure=pure.murmur3_32)
def murmur3_32(words: np.ndarray, start: int, end: int, seed: int) -> np.uint32:  # pragma: no cover
    """MurmurHash3 x86_32 of bytes ``start:end`` (the value of ``mmh3.hash(..., signed=False)``).

    The bytes are given as ``words`` (:func:`le_words`: ``words[i]`` = little-endian uint32 at
    byte ``i``), so each 4-byte block is one load.
    """
    h = np.uint32(seed)
    n = end - start
    nblocks = n // 4
    for i in range(nblocks):
        k = words[start + 4 * i]
        k = np.uint32((k * _C1) & _M32)
        k = _rotl32(k, 15)
        k = np.uint32((k * _C2) & _M32)
        h = np.uint32(h ^ k)
        h = _rotl32(h, 13)
        h = np.uint32((h * np.uint32(5) + np.uint32(0xE6546B64)) & _M32)
    # Tail without branches (they mispredict on every token): read the next word and keep only
    # the remaining bytes. With no tail the masked word is 0, and mixing 0 leaves h unchanged,
    # exactly like MurmurHash3's "if (rem)" branch. ``words`` is zero-padded past the end.
    rem = n & 3
    k = np.uint32(words[start + 4 * nblocks] & np.uint32((1 << (8 * rem)) - 1))
    k = np.uint32((k * _C1) & _M32)
    k = _rotl32(k, 15)
    k = np.uint32((k * _C2) & _M32)
    h = np.uint32(h ^ k)
    h = np.uint32(h ^ np.uint32(n))
    return _fmix32(h)


@njit(cache=True, pure=pure.le_words)
def le_words(buf: np.ndarray) -> np.ndarray:  # pragma: no cover - jit
    """``words[i]``: the little-endian uint32 starting at byte ``i`` (zero-padded at the end)."""
    n = buf.shape[0]
    words = np.zeros(n + 1, dtype=np.uint32)
    for i in range(n):
        w = np.uint32(buf[i])
        if i + 1 < n:
            w |= np.uint32(buf[i + 1]) << np.uint32(8)
        if i + 2 < n:
            w |= np.uint32(buf[i + 2]) << np.uint32(16)
        if i + 3 < n:
            w |= np.uint32(buf[i + 3]) << np.uint32(24)
        words[i] = w
    return words


@njit(cache=True)
def _unit_starts(buf: np.ndarray, start: int, end: int, kind: int, starts: np.ndarray) -> int:  # pragma: no cover
    """Write the byte offsets where tokens (WORD) or code points (CHAR) start; return their count."""
    count = 0
    if end <= start:
        return 0
    if kind == WORD:
        starts[0] = start
        count = 1
        for i in range(start, end):
            if buf[i] == 32:
                starts[count] = i + 1
                count += 1
    else:
        for i in range(start, end):
            if (buf[i] & 0xC0) != 0x80:
                starts[count] = i
                count += 1
    return count


@njit(cache=True, pure=pure.shingle_hashes)
def shingle_hashes(  # pragma: no cover - jit
    buf: np.ndarray, offsets: np.ndarray, kind: int, k: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Raw 32-bit shingle hashes of every document of a batch, in order, with repeats.

    Returns:
        ``(hashes, bounds)``: document ``d``'s hashes are ``hashes[bounds[d]:bounds[d + 1]]``.

    """
    n_docs = offsets.shape[0] - 1
    words = le_words(buf)
    starts = np.empty(buf.shape[0] + n_docs + 1, dtype=np.int64)  # unit starts of all documents
    unit_bounds = np.zeros(n_docs + 1, dtype=np.int64)
    bounds = np.zeros(n_docs + 1, dtype=np.int64)
    total = 0
    for d in range(n_docs):
        units = _unit_starts(buf, offsets[d], offsets[d + 1], kind, starts[unit_bounds[d] :])
        unit_bounds[d + 1] = unit_bounds[d] + units
        total += 0 if units == 0 else max(1, units - k + 1)
        bounds[d + 1] = total
    hashes = np.empty(total, dtype=np.uint32)
    for d in range(n_docs):
        s, e = offsets[d], offsets[d + 1]
        first = unit_bounds[d]
        units = unit_bounds[d + 1] - first
        out = bounds[d]
        if units == 0:
            continue
        if units <= k:
            hashes[out] = murmur3_32(words, s, e, seed)
            continue
        for i in range(units - k + 1):
            if i + k == units:
                stop = e
            elif kind == WORD:
                stop = starts[first + i + k] - 1  # the separating space is not part of the shingle
            else:
                stop = starts[first + i + k]
            hashes[out + i] = murmur3_32(words, starts[first + i], stop, seed)
    return hashes, bounds


@njit(cache=True, pure=pure.minhash_signatures)
def minhash_signatures(  # pragma: no cover - jit
    hashes: np.ndarray, bounds: np.ndarray, a: np.ndarray, b: np.ndarray
) -> np.ndarray:
    """MinHash signatures (datasketch scheme ``affine32``) from per-document shingle hashes.

    Each hash is pre-mixed with the MurmurHash3 finalizer, then ``a * h + b mod 2**32`` per
    permutation; the signature is the minimum per permutation (all ones for an empty document).

    Written so that LLVM vectorizes the permutation loop: 32-bit arithmetic only (no mask with a
    Python int, which types the expression as int64) and a branchless ``min`` into a row of its
    own (no store that depends on a compare). Measured on 280-shingle documents: 2.7 us a
    document against 21.9 us for the same loop with ``& 0xFFFFFFFF`` and ``if v < row[p]``.
    """
    n_docs = bounds.shape[0] - 1
    num_perm = a.shape[0]
    out = np.empty((n_docs, num_perm), dtype=np.uint32)
    row = np.empty(num_perm, dtype=np.uint32)
    for d in range(n_docs):
        row[:] = np.uint32(_M32)
        for j in range(bounds[d], bounds[d + 1]):
            h = _fmix32(hashes[j])
            for p in range(num_perm):
                row[p] = min(row[p], np.uint32(a[p] * h + b[p]))
        out[d] = row
    return out


@njit(cache=True, pure=pure.unique_segments)
def unique_segments(hashes: np.ndarray, bounds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover
    """Per document, its shingle hashes sorted with repeats removed (``np.unique`` of each), packed.

    One call per batch instead of one ``np.unique`` per document: numpy 2's ``unique`` cost
    ~38 us on a document of ~300 shingles (a sort alone: ~4 us), more than the rest of signing.

    Returns:
        ``(sets, set_bounds)``: document ``d``'s set is ``sets[set_bounds[d]:set_bounds[d + 1]]``.

    """
    n_docs = bounds.shape[0] - 1
    out = np.empty(hashes.shape[0], dtype=np.uint32)
    new_bounds = np.zeros(n_docs + 1, dtype=np.int64)
    longest = 0
    for d in range(n_docs):
        longest = max(longest, bounds[d + 1] - bounds[d])
    work = np.empty(longest, dtype=np.uint32)
    spare = np.empty(longest, dtype=np.uint32)
    counts = np.empty(257, dtype=np.int64)
    w = 0
    for d in range(n_docs):
        n = bounds[d + 1] - bounds[d]
        work[:n] = hashes[bounds[d] : bounds[d + 1]]
        _radix_sort_u32(work, spare, n, counts)
        for i in range(n):
            if i == 0 or work[i] != work[i - 1]:
                out[w] = work[i]
                w += 1
        new_bounds[d + 1] = w
    return out[:w], new_bounds


@njit(cache=True)
def _radix_sort_u32(a: np.ndarray, spare: np.ndarray, n: int, counts: np.ndarray) -> None:  # pragma: no cover
    """Sort ``a[:n]`` in place: least-significant-byte radix sort in 4 passes.

    Measured in :func:`unique_segments` on ~300 hashes a document: ~4 us a document, against
    ~10.5 us with ``np.sort`` (signing went from 30.3 to 23.7 us a document).
    """
    src, dst = a, spare
    for shift in range(0, 32, 8):
        counts[:] = 0
        for i in range(n):
            counts[((src[i] >> shift) & 255) + 1] += 1
        for b in range(256):
            counts[b + 1] += counts[b]
        for i in range(n):
            b = (src[i] >> shift) & 255
            dst[counts[b]] = src[i]
            counts[b] += 1
        src, dst = dst, src
    # four passes: the sorted values are back in ``a``


@njit(cache=True, pure=pure.compact_spaces)
def compact_spaces(buf: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover
    """Collapse runs of spaces (byte 32) to one and strip them at both ends, per document."""
    out = np.empty(buf.shape[0], dtype=np.uint8)
    new_offsets = np.zeros(offsets.shape[0], dtype=np.int64)
    w = 0
    for d in range(offsets.shape[0] - 1):
        start = w
        previous_space = True  # drops leading spaces
        for i in range(offsets[d], offsets[d + 1]):
            c = buf[i]
            space = c == 32
            out[w] = c  # branch-free: the byte is kept by advancing w, or overwritten next time
            w += 0 if (space and previous_space) else 1
            previous_space = space
        if w > start and out[w - 1] == 32:
            w -= 1
        new_offsets[d + 1] = w
    return out[:w], new_offsets


@njit(cache=True, pure=pure.text_stats)
def text_stats(buf: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover
    """Per document of normalized UTF-8: (code points, tokens)."""
    n = offsets.shape[0] - 1
    chars = np.zeros(n, dtype=np.int64)
    tokens = np.zeros(n, dtype=np.int64)
    for d in range(n):
        c = 0
        spaces = 0
        for i in range(offsets[d], offsets[d + 1]):
            b = buf[i]
            if (b & 0xC0) != 0x80:
                c += 1
            if b == 32:
                spaces += 1
        chars[d] = c
        tokens[d] = spaces + 1 if offsets[d + 1] > offsets[d] else 0
    return chars, tokens
