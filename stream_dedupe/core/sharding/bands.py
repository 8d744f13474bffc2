"""A shard's band tables: single entries (band, key, ordinal) in, bucket members out.

In a sharded index (:mod:`stream_dedupe.core.sharding`) a bucket's members are spread over the
shards that own them, so a bucket's cap (``max_bucket_size``) can only be judged by the gather,
which sees the whole bucket. A shard therefore adds exactly the entries the gather decided
(:meth:`ShardBandIndex.insert_entries`, no cap) and answers for whole buckets
(:meth:`ShardBandIndex.members`), where the single-process :class:`~stream_dedupe.core.bandindex.BandIndex`
adds a document to every band at once and answers for a document's bands.
"""

from __future__ import annotations

import numpy as np

from stream_dedupe.core.bandindex import _DELETED, _EMPTY, BandIndex
from stream_dedupe.core.jit import njit


@njit(cache=True)
def _members(  # pragma: no cover - jit
    keys: np.ndarray, vals: np.ndarray, bands: np.ndarray, wanted: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Every live entry of the buckets ``(bands[i], wanted[i])``: ``(i, ordinal)`` pairs."""
    mask = keys.shape[1] - 1
    idx = np.empty(64, dtype=np.int32)
    ords = np.empty(64, dtype=np.int32)
    n = 0
    for i in range(bands.shape[0]):
        band = bands[i]
        key = wanted[i]
        slot = int(key) & mask
        while vals[band, slot] != _EMPTY:
            if vals[band, slot] >= 0 and keys[band, slot] == key:
                if n == idx.shape[0]:
                    grown = np.empty(2 * n, dtype=np.int32)
                    grown[:n] = idx
                    idx = grown
                    grown = np.empty(2 * n, dtype=np.int32)
                    grown[:n] = ords
                    ords = grown
                idx[n] = i
                ords[n] = vals[band, slot]
                n += 1
            slot = (slot + 1) & mask
    return idx[:n], ords[:n]


@njit(cache=True)
def _insert_entries(  # pragma: no cover - jit
    keys: np.ndarray, vals: np.ndarray, bands: np.ndarray, wanted: np.ndarray, ordinals: np.ndarray
) -> None:
    """Add entry ``ordinals[i]`` under key ``wanted[i]`` of band ``bands[i]`` (no bucket cap)."""
    mask = keys.shape[1] - 1
    for i in range(bands.shape[0]):
        band = bands[i]
        slot = int(wanted[i]) & mask
        while vals[band, slot] != _EMPTY:
            slot = (slot + 1) & mask
        keys[band, slot] = wanted[i]
        vals[band, slot] = ordinals[i]


@njit(cache=True)
def _remove_entries(  # pragma: no cover - jit
    keys: np.ndarray, vals: np.ndarray, bands: np.ndarray, wanted: np.ndarray, ordinals: np.ndarray
) -> int:
    """Remove entry ``ordinals[i]`` from key ``wanted[i]`` of band ``bands[i]``; how many were live."""
    mask = keys.shape[1] - 1
    removed = 0
    for i in range(bands.shape[0]):
        band = bands[i]
        slot = int(wanted[i]) & mask
        while vals[band, slot] != _EMPTY:
            if vals[band, slot] == ordinals[i] and keys[band, slot] == wanted[i]:
                vals[band, slot] = _DELETED
                removed += 1
            slot = (slot + 1) & mask
    return removed


class ShardBandIndex(BandIndex):
    """:class:`~stream_dedupe.core.bandindex.BandIndex` with entry-level inserts, removals and bucket reads."""

    @property
    def nbytes(self) -> int:
        """Bytes of the tables' arrays (the band tables' memory)."""
        return int(self._keys.nbytes + self._vals.nbytes)

    def members(self, bands: np.ndarray, wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Live entries of the buckets ``(bands[i], wanted[i])`` (band number, high 32 bits of the band hash).

        Returns:
            ``(i, ordinal)`` pairs as two int32 arrays.

        """
        found: tuple[np.ndarray, np.ndarray] = _members(
            self._keys,
            self._vals,
            np.ascontiguousarray(bands, dtype=np.int32),
            np.ascontiguousarray(wanted, dtype=np.uint32),
        )
        return found

    def insert_entries(self, bands: np.ndarray, wanted: np.ndarray, ordinals: np.ndarray) -> None:
        """Add single entries (band, key, ordinal), with no bucket cap: the caller decided it."""
        if bands.shape[0] == 0:
            return
        per_band = int(np.bincount(bands, minlength=self.bands).max())
        while 2 * (self._used + per_band) > self.capacity:
            self._grow()
        _insert_entries(
            self._keys,
            self._vals,
            np.ascontiguousarray(bands, dtype=np.int32),
            np.ascontiguousarray(wanted, dtype=np.uint32),
            np.ascontiguousarray(ordinals, dtype=np.int32),
        )
        self._used += per_band

    def remove_entries(self, bands: np.ndarray, wanted: np.ndarray, ordinals: np.ndarray) -> int:
        """Remove single entries (band, key, ordinal); returns how many were live."""
        if bands.shape[0] == 0:
            return 0
        return int(
            _remove_entries(
                self._keys,
                self._vals,
                np.ascontiguousarray(bands, dtype=np.int32),
                np.ascontiguousarray(wanted, dtype=np.uint32),
                np.ascontiguousarray(ordinals, dtype=np.int32),
            )
        )
