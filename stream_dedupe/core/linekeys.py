"""Every line of a batch of ASCII texts, in one compiled pass: where it ends, and its boilerplate key.

Boilerplate learning (:mod:`stream_dedupe.core.boilerplate`) counts every line of every document
by a hash of its comparable form. Doing that one line at a time in Python (split, form, hash,
about 10 us a line) was three quarters of the engine's time on mail and forum text (20
Newsgroups: 48 lines a document; BENCHMARKS.md, "Boilerplate lines, a batch at a time"). Here
one kernel call per batch splits the ASCII texts into lines exactly as ``str.splitlines(keepends=True)``
does, forms each line as :func:`~stream_dedupe.core.lineform.ascii_form` does, and hashes
``source NUL form`` with MurmurHash3 x64_128, giving the first 8 bytes of ``mmh3.hash_bytes``
(:func:`~stream_dedupe.core.boilerplate.line_key`). Texts with non-ASCII characters keep the
per-line path (NFKC and Unicode word rules).

The pure twin (numba not enabled: small inputs) runs the per-line Python code and returns the
same arrays; ``tests/test_line_keys.py`` holds the two to each other and to ``line_key``.
"""

from __future__ import annotations

import mmh3
import numpy as np

from stream_dedupe.core.jit import njit
from stream_dedupe.core.lineform import _TABLE, ascii_form

#: A line whose form is empty (no letters or digits): not counted, no words.
EMPTY = 0
#: A line with words, but fewer than the learner's ``min_tokens``: not counted.
SHORT = 1
#: A line that is counted (and stripped once learned).
COUNTED = 2

_C1 = np.uint64(0x87C37B91114253D5)
_C2 = np.uint64(0x4CF5AD432745937F)
_F1 = np.uint64(0xFF51AFD7ED558CCD)
_F2 = np.uint64(0xC4CEB9FE1A85EC53)
_N1 = np.uint64(0x52DCE729)
_N2 = np.uint64(0x38495AB5)
_FIVE = np.uint64(5)


@njit(cache=True, inline="always")
def _rotl64(x: np.uint64, r: int) -> np.uint64:  # pragma: no cover - jit
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


@njit(cache=True, inline="always")
def _fmix64(k: np.uint64) -> np.uint64:  # pragma: no cover - jit
    k ^= k >> np.uint64(33)
    k *= _F1
    k ^= k >> np.uint64(33)
    k *= _F2
    k ^= k >> np.uint64(33)
    return k


@njit(cache=True)
def _le64(buf: np.ndarray, at: int, count: int) -> np.uint64:  # pragma: no cover - jit
    """Little-endian integer of ``count`` (<= 8) bytes at ``at``."""
    k = np.uint64(0)
    for i in range(count - 1, -1, -1):
        k = (k << np.uint64(8)) | np.uint64(buf[at + i])
    return k


@njit(cache=True, inline="always")
def _k1(k: np.uint64) -> np.uint64:  # pragma: no cover - jit
    """The first lane's block mix: ``rotl(k * c1, 31) * c2``."""
    return _rotl64(k * _C1, 31) * _C2


@njit(cache=True, inline="always")
def _k2(k: np.uint64) -> np.uint64:  # pragma: no cover - jit
    """The second lane's block mix: ``rotl(k * c2, 33) * c1``."""
    return _rotl64(k * _C2, 33) * _C1


@njit(cache=True)
def murmur3_x64_h1(buf: np.ndarray, n: int) -> np.uint64:  # pragma: no cover - jit
    """The first 64 bits of MurmurHash3 x64_128 (seed 0) of ``buf[:n]``: ``mmh3.hash_bytes(...)[:8]``, little-endian."""
    h1 = np.uint64(0)
    h2 = np.uint64(0)
    blocks = n // 16
    for i in range(blocks):
        h1 ^= _k1(_le64(buf, 16 * i, 8))
        h1 = (_rotl64(h1, 27) + h2) * _FIVE + _N1
        h2 ^= _k2(_le64(buf, 16 * i + 8, 8))
        h2 = (_rotl64(h2, 31) + h1) * _FIVE + _N2
    tail = n - 16 * blocks
    at = 16 * blocks
    if tail > 8:
        h2 ^= _k2(_le64(buf, at + 8, tail - 8))
    if tail > 0:
        h1 ^= _k1(_le64(buf, at, min(tail, 8)))
    h1 ^= np.uint64(n)
    h2 ^= np.uint64(n)
    h1 += h2
    h2 += h1
    h1 = _fmix64(h1)
    h2 = _fmix64(h2)
    return h1 + h2


def _line_keys_pure(
    data: np.ndarray,
    doc_bounds: np.ndarray,
    prefixes: np.ndarray,
    prefix_bounds: np.ndarray,
    table: np.ndarray,
    min_tokens: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`line_keys` without numba (the same arrays): ``splitlines``, ``ascii_form`` and mmh3 per line."""
    del table  # ascii_form's own
    line_bounds = [0]
    ends: list[int] = []
    kinds: list[int] = []
    keys: list[int] = []
    raw, prefix_raw = data.tobytes(), prefixes.tobytes()
    for d in range(len(doc_bounds) - 1):
        text = raw[doc_bounds[d] : doc_bounds[d + 1]].decode("ascii")
        prefix = prefix_raw[prefix_bounds[d] : prefix_bounds[d + 1]]
        end = 0
        for line in text.splitlines(keepends=True):
            end += len(line)
            form = ascii_form(line)
            kind = EMPTY if not form else COUNTED if form.count(" ") + 1 >= min_tokens else SHORT
            key = 0
            if kind == COUNTED:
                key = int.from_bytes(mmh3.hash_bytes(prefix + form.encode("ascii"))[:8], "little")
            ends.append(end)
            kinds.append(kind)
            keys.append(key)
        line_bounds.append(len(ends))
    return (
        np.array(line_bounds, dtype=np.int64),
        np.array(ends, dtype=np.int64),
        np.array(kinds, dtype=np.uint8),
        np.array(keys, dtype=np.uint64),
    )


@njit(cache=True, inline="always")
def _is_break(c: int) -> bool:  # pragma: no cover - jit
    """True for the ASCII bytes that end a line in ``str.splitlines`` (CR LF is one end)."""
    return c == 10 or c == 13 or c == 11 or c == 12 or c == 28 or c == 29 or c == 30


@njit(cache=True)
def _count_lines(data: np.ndarray, start: int, end: int) -> int:  # pragma: no cover - jit
    lines = 0
    i = start
    while i < end:
        c = data[i]
        i += 1
        if _is_break(c):
            if c == 13 and i < end and data[i] == 10:
                i += 1
            lines += 1
        elif i == end:
            lines += 1
    return lines


@njit(cache=True, pure=_line_keys_pure)
def line_keys(
    data: np.ndarray,
    doc_bounds: np.ndarray,
    prefixes: np.ndarray,
    prefix_bounds: np.ndarray,
    table: np.ndarray,
    min_tokens: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover - jit
    """Lines of every text of a batch: ``(line_bounds, ends, kinds, keys)``.

    Args:
        data: The ASCII texts, concatenated.
        doc_bounds: ``n + 1`` offsets of the texts in ``data``.
        prefixes: Per text, the bytes hashed before each line's form (UTF-8 source, NUL), concatenated.
        prefix_bounds: ``n + 1`` offsets of the prefixes.
        table: :data:`~stream_dedupe.core.lineform._TABLE`.
        min_tokens: Words a line needs to be counted.

    Returns:
        ``line_bounds`` (``n + 1``: text ``d``'s lines are ``line_bounds[d]:line_bounds[d + 1]``),
        and per line its end in its text (line end included), its kind (:data:`EMPTY`,
        :data:`SHORT`, :data:`COUNTED`) and, when counted, its key as a little-endian integer.

    """
    n = doc_bounds.shape[0] - 1
    line_bounds = np.zeros(n + 1, dtype=np.int64)
    longest = 0
    widest = 0
    for d in range(n):
        line_bounds[d + 1] = line_bounds[d] + _count_lines(data, doc_bounds[d], doc_bounds[d + 1])
        longest = max(longest, doc_bounds[d + 1] - doc_bounds[d])
        widest = max(widest, prefix_bounds[d + 1] - prefix_bounds[d])
    total = line_bounds[n]
    ends = np.empty(total, dtype=np.int64)
    kinds = np.empty(total, dtype=np.uint8)
    keys = np.zeros(total, dtype=np.uint64)
    scratch = np.empty(widest + longest + 1, dtype=np.uint8)
    k = 0
    for d in range(n):
        start, stop = doc_bounds[d], doc_bounds[d + 1]
        width = prefix_bounds[d + 1] - prefix_bounds[d]
        for j in range(width):
            scratch[j] = prefixes[prefix_bounds[d] + j]
        i = start
        while i < stop:
            # one line: its form after the prefix in ``scratch``, words counted by their gaps
            m = width
            gap = False
            spaces = 0
            while i < stop:
                c = data[i]
                i += 1
                if _is_break(c):
                    if c == 13 and i < stop and data[i] == 10:
                        i += 1
                    break
                f = table[c]
                if f == 0:
                    gap = m > width
                    continue
                if gap:
                    scratch[m] = 32
                    m += 1
                    spaces += 1
                    gap = False
                scratch[m] = f
                m += 1
            ends[k] = i - start
            if m == width:
                kinds[k] = EMPTY
            elif spaces + 1 >= min_tokens:
                kinds[k] = COUNTED
                keys[k] = murmur3_x64_h1(scratch, m)
            else:
                kinds[k] = SHORT
            k += 1
    return line_bounds, ends, kinds, keys


def kernel_inputs(
    texts: list[str], sources: list[str]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The first five arguments of :func:`line_keys` for ASCII ``texts`` and their sources."""
    encoded = [t.encode("ascii") for t in texts]
    prefixes = [s.encode("utf-8") + b"\0" for s in sources]
    doc_bounds = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum([len(b) for b in encoded], out=doc_bounds[1:])
    prefix_bounds = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum([len(p) for p in prefixes], out=prefix_bounds[1:])
    data = np.frombuffer(b"".join(encoded) or b"\0", dtype=np.uint8)
    prefix_data = np.frombuffer(b"".join(prefixes), dtype=np.uint8)
    return data, doc_bounds, prefix_data, prefix_bounds, _TABLE


def batch_line_keys(
    texts: list[str], sources: list[str], min_tokens: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, bytes]:
    """:func:`line_keys` over ASCII ``texts``; the keys as one little-endian blob (8 bytes a line).

    Args:
        texts: ASCII texts (the caller checks ``str.isascii``).
        sources: Each text's source (``""`` for none).
        min_tokens: Words a line needs to be counted.

    """
    line_bounds, ends, kinds, keys = line_keys(*kernel_inputs(texts, sources), min_tokens)
    return line_bounds, ends, kinds, keys.astype("<u8", copy=False).tobytes()
