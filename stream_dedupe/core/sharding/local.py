"""Shards in the gather's own process: for the embedded command, the library and the tests.

:class:`LocalShards` calls each :class:`~stream_dedupe.core.sharding.shard.IndexShard` directly.
It is the sharded index without a network: every read and write the gather makes goes through
the same :class:`~stream_dedupe.core.sharding.gather.ShardClient` calls, one round per shard, that
a transport across processes or over Kafka carries.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np

from stream_dedupe.core.sharding.gather import merge_members, owner
from stream_dedupe.core.sharding.ops import ShardOps
from stream_dedupe.core.sharding.shard import IndexShard
from stream_dedupe.storage.base import KVStore


class LocalShards:
    """``shards`` shards in this process, each on the store ``open_store(i)`` returns.

    Args:
        shards: How many.
        open_store: Opens shard ``i``'s store (a MemoryStore or a RocksStore of its own).

    """

    def __init__(self, shards: int, open_store: Callable[[int], KVStore]) -> None:
        self.shards = shards
        self.open_store = open_store
        self.parts: list[IndexShard] = []
        self.rounds = 0

    def configure(self, bands: int, rows: int) -> None:
        """Open every shard (see :class:`~stream_dedupe.core.sharding.gather.ShardClient`)."""
        if not self.parts:
            self.parts = [IndexShard(self.open_store(i), i, self.shards, bands, rows) for i in range(self.shards)]

    def applied(self) -> list[int]:
        """See :class:`~stream_dedupe.core.sharding.gather.ShardClient`."""
        return [part.applied for part in self.parts]

    def apply(self, number: int, ops: Sequence[ShardOps]) -> None:
        """See :class:`~stream_dedupe.core.sharding.gather.ShardClient`."""
        for part, shard_ops in zip(self.parts, ops, strict=True):
            part.apply(number, shard_ops)

    def members(self, bands: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, list[str]]:
        """See :class:`~stream_dedupe.core.sharding.gather.ShardClient`."""
        self.rounds += 1
        return merge_members([part.members(bands, keys) for part in self.parts])

    def get_many(self, namespace: str, keys: Sequence[bytes]) -> list[bytes | None]:
        """See :class:`~stream_dedupe.core.sharding.gather.ShardClient`."""
        self.rounds += 1
        by_shard: list[list[int]] = [[] for _ in range(self.shards)]
        for i, key in enumerate(keys):
            by_shard[owner(key, self.shards)].append(i)
        out: list[bytes | None] = [None] * len(keys)
        for part, positions in zip(self.parts, by_shard, strict=True):
            if positions:
                for i, value in zip(positions, part.get_many(namespace, [keys[i] for i in positions]), strict=True):
                    out[i] = value
        return out

    def items(self, namespace: str, shard: int) -> Iterator[tuple[bytes, bytes]]:
        """See :class:`~stream_dedupe.core.sharding.gather.ShardClient`."""
        return self.parts[shard].store.items(namespace)

    def count(self, namespace: str) -> int:
        """See :class:`~stream_dedupe.core.sharding.gather.ShardClient`."""
        return sum(part.store.count(namespace) for part in self.parts)

    def close(self) -> None:
        """Close every shard's store."""
        for part in self.parts:
            part.store.close()
        self.parts = []
