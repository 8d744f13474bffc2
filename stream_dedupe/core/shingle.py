"""Shingling of normalized text: the readable reference implementation.

The compiled kernels in :mod:`stream_dedupe.core.minhash` enumerate exactly the same shingles
(the same byte ranges of the UTF-8 normalized text); this module is the definition they are
tested against and what ``explain`` and the datasketch oracle use.
"""

from __future__ import annotations

import mmh3

from stream_dedupe.config import ShingleSpec

#: Seed of the 32-bit MurmurHash3 (x86_32) applied to each shingle's UTF-8 bytes.
SHINGLE_HASH_SEED = 0


def shingle_hash(shingle: bytes) -> int:
    """The shingle hash: unsigned 32-bit MurmurHash3 of the shingle's UTF-8 bytes.

    This is the ``hashfunc`` to give ``datasketch.MinHash`` to reproduce our signatures.

    Args:
        shingle: UTF-8 bytes of one shingle.

    Returns:
        An integer in ``[0, 2**32)``.

    """
    return int(mmh3.hash(shingle, SHINGLE_HASH_SEED, signed=False))


def shingles(normalized: str, spec: ShingleSpec) -> list[bytes]:
    """Cut a normalized text into shingles (with repeats, in order).

    A text shorter than one shingle yields a single shingle, the whole text; an empty text yields
    none.

    Args:
        normalized: Output of :meth:`stream_dedupe.core.normalize.Normalizer.normalize`.
        spec: Shingle kind and size.

    Returns:
        The UTF-8 bytes of each shingle.

    """
    if not normalized:
        return []
    k = spec.size
    if spec.kind == "word":
        tokens = normalized.split(" ")
        if len(tokens) <= k:
            return [normalized.encode()]
        return [" ".join(tokens[i : i + k]).encode() for i in range(len(tokens) - k + 1)]
    if len(normalized) <= k:
        return [normalized.encode()]
    return [normalized[i : i + k].encode() for i in range(len(normalized) - k + 1)]
