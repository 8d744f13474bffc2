"""The gather's store: the engine's state, with the index's heavy part held by shards.

:class:`ShardedStore` is the :class:`~stream_dedupe.storage.base.KVStore` a
:class:`~stream_dedupe.core.engine.DedupeEngine` runs on in a sharded index. What grows with
the corpus and is read only for candidates (the signatures, the shingle sets and the band tables)
lives in the shards, each owning the documents whose id hashes to it. What every decision reads
(records, union-find, edges, exact-content groups, the original JSON, learned boilerplate) stays
in the gather's own store. The engine is unchanged: it reads the shards' namespaces through
:meth:`ShardedStore.get_many` (its prefetches make that one round per namespace and batch) and the
band tables through a :class:`~stream_dedupe.core.sharding.window.BandWindow`.

A commit writes the gather's part together with an outbox, the encoded changes for every shard,
in one atomic write, then applies the outbox to the shards. A shard applies a commit number at
most once, so a restart that finds an outbox replays it to the shards that did not get it, and a
crash at any point loses nothing and applies nothing twice.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Sequence
from typing import Protocol

import mmh3
import numpy as np

from stream_dedupe.core.sharding import outbox
from stream_dedupe.core.sharding.ops import ShardOps, decode_all, encode_all
from stream_dedupe.core.sharding.outbox import OUTBOX_KEY, outbox_writes, read_outbox
from stream_dedupe.core.sharding.shard import SHARDED_NAMESPACES
from stream_dedupe.core.sharding.window import BandWindow
from stream_dedupe.errors import ConfigError, StateError, StateMismatchError
from stream_dedupe.storage.base import KVStore, WriteSet

__all__ = ["LAYOUT_KEY", "OUTBOX_KEY", "ShardClient", "ShardedStore", "merge_members", "owner"]

#: The gather's meta key holding the shard count.
LAYOUT_KEY = b"shards"
_SEED = 0x5D5D5D5D


def owner(key: bytes, shards: int) -> int:
    """The shard that owns a document (by the UTF-8 bytes of its id)."""
    return int(mmh3.hash(key, _SEED, signed=False)) % shards


def merge_members(answers: Sequence[tuple[np.ndarray, list[str]]]) -> tuple[np.ndarray, list[str]]:
    """The shards' :meth:`ShardClient.members` answers as one."""
    if len(answers) == 1:
        return answers[0]
    return np.concatenate([idx for idx, _ in answers]), [m for _, ids in answers for m in ids]


class ShardClient(Protocol):
    """How the gather reaches its shards (in the same process, other processes, or over Kafka)."""

    shards: int

    def configure(self, bands: int, rows: int) -> None:
        """Open (or check) every shard with the index's LSH shape; rebuilds their band tables."""

    def applied(self) -> list[int]:
        """The last commit number each shard applied."""

    def apply(self, number: int, ops: Sequence[ShardOps]) -> None:
        """Apply commit ``number``: ``ops[i]`` to shard ``i`` (a shard skips a number it holds)."""

    def members(self, bands: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, list[str]]:
        """Members of the buckets ``(bands[i], keys[i])`` over every shard, one round to each: ``(i of each, ids)``."""

    def get_many(self, namespace: str, keys: Sequence[bytes]) -> list[bytes | None]:
        """Values of a sharded namespace, each read from the key's owner."""

    def items(self, namespace: str, shard: int) -> Iterator[tuple[bytes, bytes]]:
        """All pairs of a sharded namespace on one shard, in key order."""

    def count(self, namespace: str) -> int:
        """Keys of a sharded namespace over every shard."""

    def close(self) -> None:
        """Release the shards."""


class ShardedStore:
    """The gather's :class:`~stream_dedupe.storage.base.KVStore` over its own store and the shards.

    Args:
        local: The gather's own store (everything but the sharded namespaces).
        client: The shards.

    Raises:
        StateMismatchError: if ``local`` was built with another shard count.

    """

    def __init__(self, local: KVStore, client: ShardClient) -> None:
        if client.shards < 1:
            raise ConfigError(f"index shards must be at least 1, not {client.shards}")
        self.local, self.client, self.shards = local, client, client.shards
        raw = local.get_many("meta", [LAYOUT_KEY])[0]
        if raw is None:
            local.write({"meta": {LAYOUT_KEY: str(self.shards).encode()}})
        elif int(raw) != self.shards:
            raise StateMismatchError(
                f"this state was built with {int(raw)} index shards, not {self.shards}: open it with "
                f"--index-shards {int(raw)}, or re-shard into a new state"
            )
        self.window: BandWindow | None = None
        self._shape: tuple[int, int] | None = None
        self._outbox: tuple[int, list[ShardOps]] | None = None
        self._outbox_parts = 0  # parts of the stored outbox (a smaller one deletes the rest)
        self._connected = False
        self.broken: BaseException | None = None
        self.number = 0
        self.commits = 0

    def attach(self, bands: int, rows: int, bucket_cap: int) -> BandWindow:
        """The engine's band tables over the shards (the shards are reached at the first use).

        Building an engine reaches no shard: a worker rebuilds its engine after a failed batch
        while the shards may be moving. :meth:`connect` runs before the first read or write.
        """
        self._shape = (bands, rows)
        raw, self._outbox_parts = read_outbox(lambda keys: self.local.get_many("meta", keys))
        self._outbox = None if raw is None else decode_all(raw)
        if self._outbox is not None:
            self.number = self._outbox[0]
        self.window = BandWindow(bands, rows, bucket_cap, self._members, self.owner_of, self.shards)
        return self.window

    def connect(self) -> None:
        """Open the shards with the index's LSH shape and finish an interrupted commit (once).

        Raises:
            StateMismatchError: if the shards hold commits the gather does not, or belong to
                another state.

        """
        if self._connected:
            return
        if self._shape is None:
            raise StateMismatchError("a sharded store is used before attach(): build the engine on it first")
        self.client.configure(*self._shape)
        applied = self.client.applied()
        if self._outbox is not None:
            ahead = [i for i, n in enumerate(applied) if n > self.number]
            if ahead:
                raise StateMismatchError(
                    f"shards {ahead} hold commits the gather does not ({applied} > {self.number}): the gather's "
                    "state is older than its shards'; restore them together or rebuild the shards"
                )
            self.client.apply(*self._outbox)
        elif any(applied):
            raise StateMismatchError(
                f"the shards hold commits {applied} but the gather's state has none: "
                "they belong to another state; give the shards empty directories"
            )
        self._connected = True

    def _members(self, bands: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, list[str]]:
        self.connect()
        return self.client.members(bands, keys)

    def owner_of(self, doc_id: str) -> int:
        """The shard that owns ``doc_id``."""
        return owner(doc_id.encode("utf-8"), self.shards)

    # -- KVStore ----------------------------------------------------------------------------
    def get_many(self, namespace: str, keys: Sequence[bytes]) -> list[bytes | None]:
        """Values of ``keys``: from the owners for a sharded namespace, else from the gather's store."""
        if namespace in SHARDED_NAMESPACES:
            self.connect()
            return self.client.get_many(namespace, keys)
        return self.local.get_many(namespace, keys)

    def write(self, batch: WriteSet) -> None:
        """Write the gather's part and the outbox atomically, then apply the outbox to the shards."""
        if self.broken is not None:
            raise StateError(
                f"the last commit reached the gather's state but not every shard ({self.broken!r}): reopen the "
                "state (a new engine on it), which finishes that commit, before writing again"
            ) from self.broken
        if self.window is None and any(batch.get(ns) for ns in SHARDED_NAMESPACES):
            raise StateMismatchError("a sharded store is written before attach(): build the engine on it first")
        if self.window is not None:
            self.connect()  # an interrupted commit reaches the shards before this one (a no-op after)
        ops = self.window.take_ops() if self.window is not None else [ShardOps() for _ in range(self.shards)]
        for namespace in SHARDED_NAMESPACES:
            for key, value in batch.get(namespace, {}).items():
                ops[owner(key, self.shards)].kv.setdefault(namespace, {})[key] = value
        local = {ns: writes for ns, writes in batch.items() if ns not in SHARDED_NAMESPACES}
        if not any(ops):
            self.local.write(local)
            return
        number = self.number + 1
        meta = dict(local.get("meta", {}))
        blob, part_bytes = encode_all(number, ops), outbox.OUTBOX_PART_BYTES
        meta.update(outbox_writes(blob, self._outbox_parts, part_bytes))
        self.local.write({**local, "meta": meta})
        self.number, self._outbox_parts = number, outbox.parts_of(blob, part_bytes)
        try:
            self.client.apply(number, ops)
        except BaseException as exc:
            self.broken = exc  # the outbox holds the commit: a store opened anew sends it again
            raise
        self.commits += 1

    def items(self, namespace: str) -> Iterator[tuple[bytes, bytes]]:
        """All pairs of a namespace, in key order (merged over the shards for a sharded one)."""
        if namespace not in SHARDED_NAMESPACES:
            return self.local.items(namespace)
        self.connect()
        return heapq.merge(*(self.client.items(namespace, i) for i in range(self.shards)))

    def count(self, namespace: str) -> int:
        """Number of keys in a namespace."""
        if namespace in SHARDED_NAMESPACES:
            self.connect()
            return self.client.count(namespace)
        return self.local.count(namespace)

    def close(self) -> None:
        """Close the shards and the gather's store."""
        self.client.close()
        self.local.close()
