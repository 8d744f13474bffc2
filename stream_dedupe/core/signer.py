"""The CPU-heavy half of the engine: normalize, shingle, MinHash (the "sign" stage).

A :class:`Signer` turns documents into :class:`Signed` records - content hash, length, token
count, MinHash signature and (in ``exact`` verification mode) the shingle set - that depend only
on the document and the index parameters, never on the state. The engine signs documents itself,
or takes signatures computed elsewhere (the worker's sign stage runs on every worker and partition),
and :func:`encode_signed` / :func:`decode_signed` carry them between processes with an explicit,
versioned byte layout. A :func:`params_fingerprint` in every encoded record lets the receiver
refuse signatures made with other parameters (it then signs the document itself).

Learned boilerplate makes signing depend on the state (lines learned so far): a signer whose
parameters learn boilerplate is not :attr:`Signer.stateless`, and the engine reuses its records
(signed from the unstripped text) only for documents from which no learned line is stripped.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import mmh3
import numpy as np
import orjson

from stream_dedupe.config import DedupeParams
from stream_dedupe.core import jit, kernels
from stream_dedupe.core.layout import resolve
from stream_dedupe.core.minhash import MinHasher, pack
from stream_dedupe.core.normalize import Normalizer

#: Layout of an encoded record: version, flags, fingerprint (8 bytes), content hash (16 bytes),
#: length, tokens, signature length, shingle-set length; then the uint32 little-endian arrays.
_HEAD = struct.Struct("<BB8s16sIIII")
_VERSION = 1
_HAS_SIGNATURE = 1
_HAS_SHINGLES = 2


@dataclass(frozen=True)
class Signed:
    """What deciding a document needs from its text.

    Attributes:
        content_hash: 16 bytes of MurmurHash3 x64 over the normalized text (exact-duplicate key).
        length: Characters of the normalized text (canonical election: longest wins).
        tokens: Whitespace-separated tokens of the normalized text.
        signature: ``uint32[num_perm]`` MinHash, or None for documents below ``min_tokens``.
        shingle_set: Sorted unique ``uint32`` shingle hashes (``exact`` verification only).

    """

    content_hash: bytes
    length: int
    tokens: int
    signature: np.ndarray | None = None
    shingle_set: np.ndarray | None = None

    def same_as(self, other: Signed) -> bool:
        """True if both records carry the same values (arrays compared element-wise)."""
        return (
            (self.content_hash, self.length, self.tokens) == (other.content_hash, other.length, other.tokens)
            and _same_array(self.signature, other.signature)
            and _same_array(self.shingle_set, other.shingle_set)
        )


def _same_array(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return bool(np.array_equal(a, b))


def params_fingerprint(params: DedupeParams) -> bytes:
    """8 bytes identifying every parameter that shapes a :class:`Signed` record."""
    return mmh3.hash_bytes(orjson.dumps(resolve(params).to_state(), option=orjson.OPT_SORT_KEYS))[:8]


class Signer:
    """Signs batches of texts with one set of index parameters.

    Args:
        params: The index parameters (normalization, shingling, permutations, verify mode).

    """

    def __init__(self, params: DedupeParams) -> None:
        self.params = resolve(params)
        self.normalizer = Normalizer(self.params.normalization)
        self.hasher = MinHasher(self.params.num_perm, self.params.seed, self.params.shingle)
        self.fingerprint = params_fingerprint(self.params)

    @property
    def stateless(self) -> bool:
        """True if a text's record does not depend on the state (no boilerplate learning)."""
        return not self.params.boilerplate.learn

    def sign(self, texts: Sequence[str], known: Callable[[int, bytes], bool] | None = None) -> list[Signed]:
        """Sign texts (already stripped of learned boilerplate, if any) in one vectorized batch.

        Args:
            texts: The texts.
            known: Called with a text's index and content hash; True when a record of that very
                content is stored already (an unchanged re-crawl, whose decision reads no
                signature): that text's record gets no signature or shingle set, and its MinHash
                is not computed (most of signing's time).

        """
        if not texts:
            return []
        jit.note_batch(len(texts))
        buf, offsets = self.normalizer.normalize_batch(list(texts))
        data = buf.tobytes()
        chars, tokens = kernels.text_stats(buf, offsets)
        bounds = offsets.tolist()
        min_tokens = max(self.params.min_tokens, 1)
        exact = self.params.verify == "exact"
        content_hashes = [mmh3.hash_bytes(data[bounds[i] : bounds[i + 1]]) for i in range(len(texts))]
        todo = [i for i, h in enumerate(content_hashes) if known is None or not known(i, h)]
        rows = {i: row for row, i in enumerate(todo)}  # text index -> its row among the texts hashed
        if 0 < len(todo) < len(texts):
            buf, offsets = pack([data[bounds[i] : bounds[i + 1]] for i in todo])
        if todo:
            hashes, shingle_bounds = self.hasher.shingle_hashes_packed(buf, offsets)
            signatures = self.hasher.signatures_from_hashes(hashes, shingle_bounds)
            if exact:
                sets, set_bounds = kernels.unique_segments(hashes, shingle_bounds)
                starts = set_bounds.tolist()
        out = []
        for i, content_hash in enumerate(content_hashes):
            n_tokens = int(tokens[i])
            signature = shingles = None
            row = rows.get(i)
            if row is not None and n_tokens >= min_tokens:
                signature = signatures[row]
                if exact:
                    shingles = sets[starts[row] : starts[row + 1]]
            out.append(Signed(content_hash, int(chars[i]), n_tokens, signature, shingles))
        return out

    def encode(self, signed: Signed) -> bytes:
        """:func:`encode_signed` with this signer's fingerprint."""
        return encode_signed(signed, self.fingerprint)

    def decode(self, blob: bytes) -> Signed | None:
        """:func:`decode_signed`, or None if the record was made with other parameters (or is corrupt)."""
        try:
            fingerprint, signed = decode_signed(blob)
        except ValueError:
            return None
        if fingerprint != self.fingerprint:
            return None
        if signed.signature is not None and len(signed.signature) != self.params.num_perm:
            return None
        return signed


def encode_signed(signed: Signed, fingerprint: bytes) -> bytes:
    """Serialize a record (little-endian, versioned); see :func:`decode_signed`."""
    sig = b"" if signed.signature is None else np.ascontiguousarray(signed.signature, dtype="<u4").tobytes()
    shingles = b"" if signed.shingle_set is None else np.ascontiguousarray(signed.shingle_set, dtype="<u4").tobytes()
    flags = (_HAS_SIGNATURE if signed.signature is not None else 0) | (
        _HAS_SHINGLES if signed.shingle_set is not None else 0
    )
    head = _HEAD.pack(
        _VERSION, flags, fingerprint, signed.content_hash, signed.length, signed.tokens, len(sig), len(shingles)
    )
    return head + sig + shingles


def decode_signed(blob: bytes) -> tuple[bytes, Signed]:
    """``(params fingerprint, record)`` of an encoded record.

    Raises:
        ValueError: if the bytes are not an encoded record of a known version.

    """
    if len(blob) < _HEAD.size:
        raise ValueError(f"signed record too short ({len(blob)} bytes)")
    version, flags, fingerprint, content_hash, length, tokens, n_sig, n_sh = _HEAD.unpack_from(blob)
    if version != _VERSION:
        raise ValueError(f"unknown signed record version {version}")
    if len(blob) != _HEAD.size + n_sig + n_sh or n_sig % 4 or n_sh % 4:
        raise ValueError("signed record length does not match its header")
    pos = _HEAD.size
    signature = shingles = None
    if flags & _HAS_SIGNATURE:
        signature = _u32_view(blob, n_sig // 4, pos)
    pos += n_sig
    if flags & _HAS_SHINGLES:
        shingles = _u32_view(blob, n_sh // 4, pos)
    return fingerprint, Signed(content_hash, length, tokens, signature, shingles)


def _u32_view(blob: bytes, count: int, offset: int) -> np.ndarray:
    """``count`` uint32 at ``offset``, copied when the view would be unaligned.

    The header is not a multiple of 4 bytes; the kernels are compiled for aligned arrays.
    """
    view = np.frombuffer(blob, dtype="<u4", count=count, offset=offset).astype(np.uint32, copy=False)
    return view if view.flags.aligned else view.copy()
