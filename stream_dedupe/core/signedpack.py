"""A batch of :class:`~stream_dedupe.core.signer.Signed` records as a few arrays, to cross a process boundary.

``dedupe --jobs`` signs in worker processes. One encoded record a document
(:func:`~stream_dedupe.core.signer.encode_signed`, the Kafka worker's header format) costs the
deciding process 11-13 us a document to decode: a header to unpack and two arrays to copy, since
the header leaves them unaligned. Packed by column, a batch is one signature matrix and one
array of shingle sets, and each record's arrays are views into them: 4.1-4.4 us a document on
20 Newsgroups and the synthetic corpus (BENCHMARKS.md, "dedupe --jobs N").
``tests/test_signedpack.py`` holds the round trip to the records packed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from stream_dedupe.core.rows import stack_rows
from stream_dedupe.core.signer import Signed

_HASH_BYTES = 16


class PackedSigned(NamedTuple):
    """The records of a batch by column, with the fingerprint of the parameters they were made with."""

    fingerprint: bytes
    content_hashes: bytes  # 16 bytes a record
    lengths: np.ndarray  # int64
    tokens: np.ndarray  # int64
    has_signature: np.ndarray  # bool
    signatures: np.ndarray  # uint32 (records with a signature, num_perm)
    has_shingles: np.ndarray  # bool
    shingles: np.ndarray  # uint32, every shingle set one after the other
    shingle_bounds: np.ndarray  # int64, where each record's set starts and ends (records with one)


def pack_signed(records: Sequence[Signed], fingerprint: bytes, num_perm: int) -> PackedSigned:
    """Pack ``records`` (made with parameters of ``fingerprint``, signatures of ``num_perm`` values)."""
    sigs = [r.signature for r in records if r.signature is not None]
    sets = [r.shingle_set for r in records if r.shingle_set is not None]
    bounds = np.zeros(len(sets) + 1, dtype=np.int64)
    np.cumsum([len(s) for s in sets], out=bounds[1:])
    return PackedSigned(
        fingerprint,
        b"".join(r.content_hash for r in records),
        np.fromiter((r.length for r in records), dtype=np.int64, count=len(records)),
        np.fromiter((r.tokens for r in records), dtype=np.int64, count=len(records)),
        np.fromiter((r.signature is not None for r in records), dtype=bool, count=len(records)),
        stack_rows(sigs).astype(np.uint32, copy=False) if sigs else np.zeros((0, num_perm), dtype=np.uint32),
        np.fromiter((r.shingle_set is not None for r in records), dtype=bool, count=len(records)),
        np.concatenate(sets).astype(np.uint32, copy=False) if sets else np.zeros(0, dtype=np.uint32),
        bounds,
    )


def unpack_signed(packed: PackedSigned, fingerprint: bytes, num_perm: int) -> list[Signed | None]:
    """The records :func:`pack_signed` packed; all None if made with other parameters (the caller signs them)."""
    n = len(packed.lengths)
    if packed.fingerprint != fingerprint or packed.signatures.shape[1:] != (num_perm,):
        return [None] * n
    hashes = packed.content_hashes
    rows = iter(packed.signatures)  # views, aligned: the kernels take them as they are
    spans = packed.shingle_bounds.tolist()
    shingles = packed.shingles
    out: list[Signed | None] = []
    k = 0
    for i, (length, tokens, signed, shingled) in enumerate(
        zip(
            packed.lengths.tolist(),
            packed.tokens.tolist(),
            packed.has_signature.tolist(),
            packed.has_shingles.tolist(),
            strict=True,
        )
    ):
        shingle_set = None
        if shingled:
            shingle_set = shingles[spans[k] : spans[k + 1]]
            k += 1
        at = i * _HASH_BYTES
        out.append(Signed(hashes[at : at + _HASH_BYTES], length, tokens, next(rows) if signed else None, shingle_set))
    return out
