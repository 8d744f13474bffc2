"""Kafka's default partition of many keys at once (murmur2, as the Java client and aiokafka compute it).

The worker publishes each batch's events and canonical documents keyed by document id, and picks
their partitions itself (whole producer batches per partition). aiokafka's ``DefaultPartitioner``
hashes one key at a time in pure Python, 2-8 us a key (10-48 bytes) and 1.6% of a worker's CPU
(py-spy, BENCHMARKS.md "A smaller redo journal"); this hashes the keys of a batch with numpy, grouped by
length, one vector operation per 4 bytes of key. Written here because no maintained library
exposes Kafka's murmur2 over arrays; ``tests/test_worker_partition.py`` checks it against
aiokafka's for every length up to 70 bytes and for random keys.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from aiokafka.partitioner import DefaultPartitioner  # type: ignore[import-untyped]

_SEED = 0x9747B28C
_M = np.uint32(0x5BD1E995)
_ONE_KEY = DefaultPartitioner()


def murmur2_many(keys: Sequence[bytes]) -> np.ndarray:
    """Kafka's murmur2 (``org.apache.kafka.common.utils.Utils.murmur2``) of each key, as uint32."""
    out = np.empty(len(keys), dtype=np.uint32)
    by_length: dict[int, list[int]] = {}
    for i, key in enumerate(keys):
        by_length.setdefault(len(key), []).append(i)
    for length, rows in by_length.items():
        data = np.frombuffer(b"".join(keys[i] for i in rows), dtype=np.uint8).reshape(len(rows), length)
        out[rows] = _murmur2_same_length(data, length)
    return out


def _murmur2_same_length(data: np.ndarray, length: int) -> np.ndarray:
    """murmur2 of the rows of ``data`` (n x length bytes); uint32 arithmetic wraps as Java's int does."""
    h = np.full(len(data), (_SEED ^ length) & 0xFFFFFFFF, dtype=np.uint32)
    whole = length // 4
    if whole:
        words = np.ascontiguousarray(data[:, : 4 * whole]).view("<u4").astype(np.uint32, copy=False)
        for column in range(whole):
            k = words[:, column] * _M
            k ^= k >> np.uint32(24)
            k *= _M
            h *= _M
            h ^= k
    tail = length & 3
    base = length & ~3
    if tail >= 3:
        h ^= data[:, base + 2].astype(np.uint32) << np.uint32(16)
    if tail >= 2:
        h ^= data[:, base + 1].astype(np.uint32) << np.uint32(8)
    if tail >= 1:
        h ^= data[:, base].astype(np.uint32)
        h *= _M
    h ^= h >> np.uint32(13)
    h *= _M
    h ^= h >> np.uint32(15)
    return h


def default_partitions(keys: Sequence[bytes | None], partitions: Sequence[int]) -> list[int]:
    """The partition aiokafka's (and the Java client's) default partitioner gives each key.

    Args:
        keys: Record keys; a None key gets a random partition, as the default partitioner gives it.
        partitions: The topic's partitions, sorted by id.

    """
    keyed = [(i, key) for i, key in enumerate(keys) if key is not None]
    chosen: list[int] = [0] * len(keys)
    if keyed:
        hashes = murmur2_many([key for _, key in keyed]) & np.uint32(0x7FFFFFFF)
        for (i, _), index in zip(keyed, (hashes % np.uint32(len(partitions))).tolist(), strict=True):
            chosen[i] = partitions[index]
    if len(keyed) < len(keys):
        for i, key in enumerate(keys):
            if key is None:
                chosen[i] = _ONE_KEY(None, partitions, partitions)
    return chosen
