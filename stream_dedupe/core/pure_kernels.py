"""Pure numpy/mmh3 implementations of the signing kernels, for inputs too small to repay numba.

Each function takes and returns exactly what its compiled twin in :mod:`stream_dedupe.core.kernels`
(or :mod:`stream_dedupe.core.lsh`) does, with the same values bit for bit: the shingles are the
same byte ranges, hashed by ``mmh3`` (the reference MurmurHash3 the kernel reimplements), and
the MinHash and band-hash arithmetic is the same modular uint32/uint64 arithmetic, vectorized
(numpy arrays wrap on overflow, like the kernels). ``tests/test_pure_kernels.py`` checks every
function against the compiled kernel and the signatures against datasketch.
"""

from __future__ import annotations

import mmh3
import numpy as np

WORD = 0
CHAR = 1
_M32 = 0xFFFFFFFF


def le_words(buf: np.ndarray) -> np.ndarray:
    """``words[i]``: the little-endian uint32 starting at byte ``i`` (zero-padded at the end)."""
    n = buf.shape[0]
    padded = np.zeros(n + 4, dtype=np.uint32)
    padded[:n] = buf
    words: np.ndarray = padded[: n + 1] | padded[1 : n + 2] << 8 | padded[2 : n + 3] << 16 | padded[3 : n + 4] << 24
    return words


def murmur3_32(words: np.ndarray, start: int, end: int, seed: int) -> np.uint32:
    """MurmurHash3 x86_32 of bytes ``start:end`` given as :func:`le_words` (by ``mmh3``)."""
    data = (words[start:end] & 0xFF).astype(np.uint8).tobytes()
    value: int = mmh3.hash(data, seed, signed=False)
    return np.uint32(value)


def _unit_starts(data: bytes, kind: int) -> list[int]:
    """Byte offsets where tokens (WORD: after each space) or code points (CHAR) start."""
    if not data:
        return []
    arr = np.frombuffer(data, dtype=np.uint8)
    if kind == WORD:
        return [0, *(np.flatnonzero(arr == 32) + 1).tolist()]
    starts: list[int] = np.flatnonzero((arr & 0xC0) != 0x80).tolist()
    return starts


def shingle_hashes(buf: np.ndarray, offsets: np.ndarray, kind: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Raw 32-bit shingle hashes of every document, with their bounds (see the kernel)."""
    n_docs = offsets.shape[0] - 1
    raw = buf.tobytes()
    bounds = np.zeros(n_docs + 1, dtype=np.int64)
    out: list[int] = []
    for d in range(n_docs):
        s, e = int(offsets[d]), int(offsets[d + 1])
        data = raw[s:e]
        starts = _unit_starts(data, kind)
        units = len(starts)
        if units == 0:
            pass
        elif units <= k:
            out.append(mmh3.hash(data, seed, signed=False))
        else:
            gap = 1 if kind == WORD else 0  # the separating space is not part of a word shingle
            stops = [starts[i + k] - gap for i in range(units - k)] + [len(data)]
            out.extend(mmh3.hash(data[starts[i] : stops[i]], seed, signed=False) for i in range(units - k + 1))
        bounds[d + 1] = len(out)
    return np.array(out, dtype=np.uint32), bounds


def fmix32(h: np.ndarray) -> np.ndarray:
    """The MurmurHash3 32-bit finalizer of a uint32 array."""
    h = h ^ (h >> np.uint32(16))
    h = h * np.uint32(0x85EBCA6B)
    h = h ^ (h >> np.uint32(13))
    h = h * np.uint32(0xC2B2AE35)
    out: np.ndarray = h ^ (h >> np.uint32(16))
    return out


def minhash_signatures(hashes: np.ndarray, bounds: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """MinHash signatures (scheme ``affine32``) from per-document shingle hashes (see the kernel)."""
    n_docs = bounds.shape[0] - 1
    out = np.full((n_docs, a.shape[0]), _M32, dtype=np.uint32)
    mixed = fmix32(np.ascontiguousarray(hashes, dtype=np.uint32))
    for d in range(n_docs):
        s, e = int(bounds[d]), int(bounds[d + 1])
        if e > s:
            out[d] = (mixed[s:e, None] * a[None, :] + b[None, :]).min(axis=0)
    return out


def compact_spaces(buf: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Collapse runs of spaces to one and strip them at both ends, per document."""
    raw = buf.tobytes()
    parts = [
        b" ".join(p for p in raw[int(offsets[d]) : int(offsets[d + 1])].split(b" ") if p)
        for d in range(offsets.shape[0] - 1)
    ]
    new_offsets = np.zeros(offsets.shape[0], dtype=np.int64)
    if parts:
        np.cumsum([len(p) for p in parts], out=new_offsets[1:])
    return np.frombuffer(b"".join(parts), dtype=np.uint8).copy(), new_offsets


def text_stats(buf: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per document of normalized UTF-8: (code points, tokens)."""
    n = offsets.shape[0] - 1
    chars = np.zeros(n, dtype=np.int64)
    tokens = np.zeros(n, dtype=np.int64)
    for d in range(n):
        seg = buf[int(offsets[d]) : int(offsets[d + 1])]
        if seg.shape[0]:
            chars[d] = np.count_nonzero((seg & 0xC0) != 0x80)
            tokens[d] = np.count_nonzero(seg == 32) + 1
    return chars, tokens


def band_hashes(signatures: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """``(n, bands)`` uint64 hashes of each band of each signature (see ``lsh._band_hashes``)."""
    n = signatures.shape[0]
    sig = signatures.astype(np.uint64)
    out = np.empty((n, bands), dtype=np.uint64)
    m1, m2 = np.uint64(0xFF51AFD7ED558CCD), np.uint64(0xC4CEB9FE1A85EC53)
    s33, s29 = np.uint64(33), np.uint64(29)
    for band in range(bands):
        h = np.full(n, np.uint64(0x9E3779B97F4A7C15) ^ np.uint64(band), dtype=np.uint64)
        for r in range(band * rows, (band + 1) * rows):
            h = h ^ sig[:, r]
            h = h * m1
            h = h ^ (h >> s33)
        h = h * m2
        out[:, band] = h ^ (h >> s29)
    return out


def unique_segments(hashes: np.ndarray, bounds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per document, its hashes sorted with repeats removed (``np.unique`` of each segment), packed.

    One sort for the whole batch: the key is ``document << 32 | hash``, so the sorted keys are the
    documents in order, each one's hashes ascending.
    """
    n_docs = bounds.shape[0] - 1
    doc = np.repeat(np.arange(n_docs, dtype=np.uint64), np.diff(bounds))
    keys = np.sort((doc << np.uint64(32)) | hashes.astype(np.uint64))
    keep = np.ones(keys.shape[0], dtype=bool)
    np.not_equal(keys[1:], keys[:-1], out=keep[1:])
    kept = keys[keep]
    out = (kept & np.uint64(_M32)).astype(np.uint32)
    new_bounds = np.zeros(n_docs + 1, dtype=np.int64)
    new_bounds[1:] = np.cumsum(np.bincount((kept >> np.uint64(32)).astype(np.int64), minlength=n_docs))
    return out, new_bounds
