"""The LSH band tables: an in-memory index derived from the stored signatures.

Why not one state key per band bucket: with 18 bands that is 18 reads and 18 writes per document
in RocksDB (and 18 changelog records per document in the worker); measured, those key operations
alone cost more than everything else the engine does per document. The band tables are therefore
*derived* data: compact open-addressing hash tables in numpy arrays (8 bytes per entry per band,
no Python objects), rebuilt from the signatures that the state does store, once at start-up
(see BENCHMARKS.md for the rebuild time). Each band has its own table keyed by the high 32 bits of
the band hash, which also picks the slot (so a table can be rehashed from its keys alone); a
32-bit collision only adds a candidate, which verification then rejects.
"""

from __future__ import annotations

import numpy as np

from stream_dedupe.core.jit import njit  # numba itself only once the work repays it
from stream_dedupe.core.lsh import band_hashes

_EMPTY = -1
_DELETED = -2


@njit(cache=True)
def _query_insert(  # pragma: no cover - jit
    keys: np.ndarray,
    vals: np.ndarray,
    hashes: np.ndarray,
    ordinal: int,
    cap: int,
    insert: bool,
    out: np.ndarray,
    skipped: np.ndarray,
) -> tuple[int, int]:
    mask = keys.shape[1] - 1
    found = 0
    full = 0
    for band in range(hashes.shape[0]):
        skipped[band] = 0
        h = hashes[band]
        key = np.uint32(h >> np.uint64(32))
        slot = int(key) & mask
        same = 0
        while vals[band, slot] != _EMPTY:
            if vals[band, slot] >= 0 and keys[band, slot] == key:
                if found < out.shape[0]:
                    out[found] = vals[band, slot]
                    found += 1
                same += 1
            slot = (slot + 1) & mask
        if insert:
            if same >= cap:
                full += 1
                skipped[band] = 1
            else:
                keys[band, slot] = key
                vals[band, slot] = ordinal
    return found, full


@njit(cache=True)
def _query_many(keys: np.ndarray, vals: np.ndarray, hashes: np.ndarray) -> np.ndarray:  # pragma: no cover - jit
    """Every live ordinal sharing a band with any row of ``hashes`` (with repeats)."""
    mask = keys.shape[1] - 1
    found = np.empty(64, dtype=np.int32)
    n = 0
    for d in range(hashes.shape[0]):
        for band in range(hashes.shape[1]):
            h = hashes[d, band]
            key = np.uint32(h >> np.uint64(32))
            slot = int(key) & mask
            while vals[band, slot] != _EMPTY:
                if vals[band, slot] >= 0 and keys[band, slot] == key:
                    if n == found.shape[0]:
                        grown = np.empty(2 * n, dtype=np.int32)
                        grown[:n] = found
                        found = grown
                    found[n] = vals[band, slot]
                    n += 1
                slot = (slot + 1) & mask
    return found[:n]


@njit(cache=True)
def _any_match(keys: np.ndarray, vals: np.ndarray, hashes: np.ndarray) -> np.ndarray:  # pragma: no cover - jit
    """Per row of ``hashes``: True if a live entry shares any of its bands."""
    mask = keys.shape[1] - 1
    out = np.zeros(hashes.shape[0], dtype=np.bool_)
    for d in range(hashes.shape[0]):
        for band in range(hashes.shape[1]):
            key = np.uint32(hashes[d, band] >> np.uint64(32))
            slot = int(key) & mask
            while vals[band, slot] != _EMPTY:
                if vals[band, slot] >= 0 and keys[band, slot] == key:
                    out[d] = True
                    break
                slot = (slot + 1) & mask
            if out[d]:
                break
    return out


@njit(cache=True)
def _insert_capped(  # pragma: no cover - jit
    keys: np.ndarray, vals: np.ndarray, hashes: np.ndarray, first: int, cap: int
) -> int:
    """Add rows ``d`` of ``hashes`` as ordinals ``first + d`` in order, as :func:`_query_insert` would.

    A bucket already holding ``cap`` live entries is not joined; returns how many were not.
    """
    mask = keys.shape[1] - 1
    full = 0
    for d in range(hashes.shape[0]):
        for band in range(hashes.shape[1]):
            key = np.uint32(hashes[d, band] >> np.uint64(32))
            slot = int(key) & mask
            same = 0
            while vals[band, slot] != _EMPTY:
                if vals[band, slot] >= 0 and keys[band, slot] == key:
                    same += 1
                slot = (slot + 1) & mask
            if same >= cap:
                full += 1
            else:
                keys[band, slot] = key
                vals[band, slot] = first + d
    return full


@njit(cache=True)
def _insert_masked(  # pragma: no cover - jit
    keys: np.ndarray, vals: np.ndarray, hashes: np.ndarray, first: int, skipped: np.ndarray
) -> None:
    """Add rows ``d`` of ``hashes`` as ordinals ``first + d`` to every band ``b`` where ``skipped[d, b]`` is 0."""
    mask = keys.shape[1] - 1
    for d in range(hashes.shape[0]):
        for band in range(hashes.shape[1]):
            if skipped[d, band]:
                continue
            key = np.uint32(hashes[d, band] >> np.uint64(32))
            slot = int(key) & mask
            while vals[band, slot] != _EMPTY:
                slot = (slot + 1) & mask
            keys[band, slot] = key
            vals[band, slot] = first + d


@njit(cache=True)
def _bucket_sizes(keys: np.ndarray, vals: np.ndarray, hashes: np.ndarray) -> np.ndarray:  # pragma: no cover - jit
    """Per band: how many live entries share the band key of ``hashes[band]``."""
    mask = keys.shape[1] - 1
    sizes = np.zeros(hashes.shape[0], dtype=np.int64)
    for band in range(hashes.shape[0]):
        key = np.uint32(hashes[band] >> np.uint64(32))
        slot = int(key) & mask
        while vals[band, slot] != _EMPTY:
            if vals[band, slot] >= 0 and keys[band, slot] == key:
                sizes[band] += 1
            slot = (slot + 1) & mask
    return sizes


@njit(cache=True)
def _earlier_twin(hashes: np.ndarray) -> np.ndarray:  # pragma: no cover - jit
    """Per row: True if an earlier row has the same band key (high 32 bits) in some band."""
    n, bands = hashes.shape
    out = np.zeros(n, dtype=np.bool_)
    for band in range(bands):
        column = (hashes[:, band] >> np.uint64(32)).astype(np.uint32)
        order = np.argsort(column, kind="mergesort")
        for k in range(1, n):
            if column[order[k]] == column[order[k - 1]]:
                out[order[k]] = True
    return out


@njit(cache=True)
def _remove(keys: np.ndarray, vals: np.ndarray, hashes: np.ndarray, ordinal: int) -> int:  # pragma: no cover
    mask = keys.shape[1] - 1
    removed = 0
    for band in range(hashes.shape[0]):
        h = hashes[band]
        key = np.uint32(h >> np.uint64(32))
        slot = int(key) & mask
        while vals[band, slot] != _EMPTY:
            if vals[band, slot] == ordinal and keys[band, slot] == key:
                vals[band, slot] = _DELETED
                removed += 1
            slot = (slot + 1) & mask
    return removed


def earlier_twins(hashes: np.ndarray) -> np.ndarray:
    """Per row of the ``(n, bands)`` band ``hashes``: True if an earlier row shares a band key with it."""
    if hashes.shape[0] < 2:
        return np.zeros(hashes.shape[0], dtype=np.bool_)
    found: np.ndarray = _earlier_twin(np.ascontiguousarray(hashes))
    return found


@njit(cache=True)
def _rehash(keys: np.ndarray, vals: np.ndarray, new_keys: np.ndarray, new_vals: np.ndarray) -> int:  # pragma: no cover
    mask = new_keys.shape[1] - 1
    live = 0
    for band in range(keys.shape[0]):
        for i in range(keys.shape[1]):
            v = vals[band, i]
            if v < 0:
                continue
            slot = int(keys[band, i]) & mask
            while new_vals[band, slot] != _EMPTY:
                slot = (slot + 1) & mask
            new_keys[band, slot] = keys[band, i]
            new_vals[band, slot] = v
            live += 1
    return live


class BandIndex:
    """LSH band tables over document ordinals (ints assigned by the caller).

    Args:
        bands: Number of bands.
        rows: Rows per band.
        capacity: Initial slots per band (rounded up to a power of two; grows by doubling).

    """

    def __init__(self, bands: int, rows: int, capacity: int = 1 << 14) -> None:
        self.bands = bands
        self.rows = rows
        size = 1 << max(4, (capacity - 1).bit_length())
        self._keys = np.zeros((bands, size), dtype=np.uint32)
        self._vals = np.full((bands, size), _EMPTY, dtype=np.int32)
        self._used = 0  # slots ever filled per band (live + deleted)
        self._out = np.empty(0, dtype=np.int32)
        #: Per band, 1 where the last :meth:`query_insert` found the bucket full and did not join it.
        self.skipped = np.zeros(bands, dtype=np.uint8)

    @property
    def capacity(self) -> int:
        """Slots per band."""
        return int(self._keys.shape[1])

    def hashes(self, signatures: np.ndarray) -> np.ndarray:
        """``(n, bands)`` uint64 band hashes of signatures (computed once per document)."""
        return band_hashes(signatures, self.bands, self.rows)

    def query_insert(self, hashes: np.ndarray, ordinal: int, cap: int, insert: bool = True) -> tuple[np.ndarray, int]:
        """Ordinals sharing a band with ``hashes``; then add ``ordinal`` (unless a bucket is full).

        Args:
            hashes: The document's band hashes, shape ``(bands,)``.
            ordinal: The document's ordinal.
            cap: A bucket that already holds ``cap`` entries is not joined (a hot bucket).
            insert: False to only look up.

        Returns:
            ``(ordinals found (with repeats), buckets that were full)``.

        """
        if insert and 2 * (self._used + 1) > self.capacity:
            self._grow()
        if self._out.shape[0] < self.bands * cap:
            self._out = np.empty(self.bands * cap, dtype=np.int32)
        found, full = _query_insert(self._keys, self._vals, hashes, ordinal, cap, insert, self._out, self.skipped)
        if insert:
            self._used += 1
        return self._out[:found].copy(), int(full)

    def query_many(self, hashes: np.ndarray) -> np.ndarray:
        """Ordinals sharing a band with any of the ``(n, bands)`` rows of ``hashes`` (with repeats)."""
        found: np.ndarray = _query_many(self._keys, self._vals, np.ascontiguousarray(hashes))
        return found

    def any_match(self, hashes: np.ndarray) -> np.ndarray:
        """Per row of the ``(n, bands)`` ``hashes``: True if an entry shares one of its bands."""
        found: np.ndarray = _any_match(self._keys, self._vals, np.ascontiguousarray(hashes))
        return found

    def insert_many(self, hashes: np.ndarray, first: int) -> None:
        """Add the rows of ``hashes`` as ordinals ``first, first + 1, ...`` in one compiled call.

        Only for rows known to share no band with any entry (no bucket can be full), so the
        result is the one :meth:`query_insert` would give row by row.
        """
        while 2 * (self._used + hashes.shape[0]) > self.capacity:
            self._grow()
        none_skipped = np.zeros(hashes.shape, dtype=np.uint8)
        _insert_masked(self._keys, self._vals, np.ascontiguousarray(hashes), first, none_skipped)
        self._used += hashes.shape[0]

    def reserve(self, entries: int) -> None:
        """Grow the tables now to hold ``entries`` more rows (a rebuild: one rehash, not one per doubling)."""
        while 2 * (self._used + entries) > self.capacity:
            self._grow()

    def insert_capped(self, hashes: np.ndarray, first: int, cap: int) -> int:
        """Add the rows of ``hashes`` as ordinals ``first, first + 1, ...``, each as :meth:`query_insert` would.

        The same tables as one :meth:`query_insert` a row (no bucket joined past ``cap``), in
        one compiled call and without collecting the ordinals found; returns the buckets that
        were full.
        """
        self.reserve(hashes.shape[0])
        full = int(_insert_capped(self._keys, self._vals, np.ascontiguousarray(hashes), first, cap))
        self._used += hashes.shape[0]
        return full

    def insert_masked(self, hashes: np.ndarray, first: int, skipped: np.ndarray) -> None:
        """Add the rows of ``hashes`` as ordinals ``first, first + 1, ...`` to the bands ``skipped`` leaves them.

        No cap is checked: ``skipped`` (``(n, bands)`` uint8, 1 = not joined) says which buckets each
        document joined when it arrived, so the tables are the live ones (a rebuild from the state).
        """
        self.reserve(hashes.shape[0])
        _insert_masked(self._keys, self._vals, np.ascontiguousarray(hashes), first, np.ascontiguousarray(skipped))
        self._used += hashes.shape[0]

    def bucket_sizes(self, hashes: np.ndarray) -> np.ndarray:
        """Per band: the live entries of the bucket of ``hashes[band]`` (shape ``(bands,)``)."""
        sizes: np.ndarray = _bucket_sizes(self._keys, self._vals, np.ascontiguousarray(hashes))
        return sizes

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The tables as arrays (``keys``, ``vals``, ``used``): :meth:`from_arrays` gives them back."""
        return {"keys": self._keys, "vals": self._vals, "used": np.array([self._used], dtype=np.int64)}

    @classmethod
    def from_arrays(cls, bands: int, rows: int, arrays: dict[str, np.ndarray]) -> BandIndex:
        """Tables saved by :meth:`to_arrays` (shapes checked: ValueError if they are not ``bands`` tables)."""
        keys, vals = arrays["keys"], arrays["vals"]
        size = keys.shape[1] if keys.ndim == 2 else 0
        if keys.shape != (bands, size) or vals.shape != keys.shape or size < 16 or size & (size - 1):
            raise ValueError(f"band tables of shape {keys.shape} are not {bands} tables of a power-of-two size")
        index = cls(bands, rows, capacity=16)
        index._keys = np.ascontiguousarray(keys, dtype=np.uint32)
        index._vals = np.ascontiguousarray(vals, dtype=np.int32)
        index._used = int(arrays["used"][0])
        return index

    def remove(self, hashes: np.ndarray, ordinal: int) -> int:
        """Remove ``ordinal``'s entries; returns how many were removed."""
        return int(_remove(self._keys, self._vals, hashes, ordinal))

    def _grow(self) -> None:
        size = self.capacity * 2
        keys = np.zeros((self.bands, size), dtype=np.uint32)
        vals = np.full((self.bands, size), _EMPTY, dtype=np.int32)
        live = _rehash(self._keys, self._vals, keys, vals)
        self._keys, self._vals = keys, vals
        self._used = live // max(self.bands, 1)
