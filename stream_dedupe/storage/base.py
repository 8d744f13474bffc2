"""The key-value interface the engine's state is built on.

A store has a fixed set of namespaces (column families in RocksDB). Writes arrive as one atomic
batch per engine batch, so an interrupted run never leaves half a decision behind.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Protocol

#: Every namespace of the state, and what it maps.
NAMESPACES: dict[str, str] = {
    "meta": "parameters, counters, run checkpoint",
    "docs": "document id -> document record (content hash, canonical key, flags)",
    "sigs": "document id -> MinHash signature (little-endian uint32); the LSH band tables are rebuilt from it",
    "sets": "document id -> sorted shingle hash set (exact verification only)",
    "exact": "normalized content hash -> ids of the documents with that content",
    "parent": "document id -> union-find parent (non-roots only)",
    "clusters": "root id -> cluster record (clusters of two or more only)",
    "edges": "document id -> verified duplicate pairs it takes part in",
    "documents": "document id -> original JSON of every document (for --deduped and re-election)",
    "boilerplate": "hash of (source, line) -> documents it occurred in (learned boilerplate)",
}

#: A batch of writes: namespace -> key -> value, or None to delete the key.
WriteSet = Mapping[str, Mapping[bytes, bytes | None]]


class KVStore(Protocol):
    """A namespaced byte key-value store with atomic batch writes."""

    def get_many(self, namespace: str, keys: Sequence[bytes]) -> list[bytes | None]:
        """Values of ``keys`` (None where missing), in order."""

    def write(self, batch: WriteSet) -> None:
        """Apply all puts and deletes of ``batch`` atomically."""

    def items(self, namespace: str) -> Iterator[tuple[bytes, bytes]]:
        """All pairs of a namespace, in key order."""

    def count(self, namespace: str) -> int:
        """Number of keys in a namespace (may be an estimate for large on-disk stores)."""

    def close(self) -> None:
        """Flush and release the store; further calls are errors."""
