"""Incremental union-find over verified duplicate pairs, with per-cluster canonical and label.

The structure lives in a :class:`ClusterStore` (plain dicts in tests, the state's tables in the
engine). A cluster's *label* is its smallest member id and its canonical follows
:mod:`stream_dedupe.core.canonical`; both are functions of the member set alone, so the final
clusters do not depend on arrival order. Documents that were never merged have no records at all
(a singleton is its own label and canonical), which keeps the common case write-free.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from stream_dedupe.core.canonical import better
from stream_dedupe.errors import StateMismatchError
from stream_dedupe.model import CanonicalKey, ClusterInfo

#: A path this long is checked for a repeated member (paths are compressed: a few steps at most).
#: A cycle, which only a state written by two deciders at once can hold, looped without end.
_CYCLE_CHECK_EVERY = 1024

__all__ = ["ClusterInfo", "ClusterStore", "MemoryClusterStore", "MergeResult", "UnionFind"]


class ClusterStore(Protocol):
    """Where union-find keeps parent pointers and root records."""

    def get_parent(self, doc_id: str) -> str | None:
        """Parent of a non-root document, or None for a root."""

    def set_parent(self, doc_id: str, parent: str | None) -> None:
        """Set (or clear, with None) the parent of a document."""

    def get_cluster(self, root: str) -> ClusterInfo | None:
        """Root record of a cluster of two or more, or None for a singleton."""

    def set_cluster(self, root: str, info: ClusterInfo | None) -> None:
        """Write (or delete, with None) a root record."""

    def canonical_key(self, doc_id: str) -> CanonicalKey:
        """The canonical key of a known document."""


@dataclass(frozen=True)
class MergeResult:
    """What a union did.

    Attributes:
        root: Root of the resulting cluster.
        before: The two clusters that were joined (equal when they already were one).
        after: The resulting cluster.

    """

    root: str
    before: tuple[ClusterInfo, ClusterInfo]
    after: ClusterInfo


class UnionFind:
    """Union by size with path compression over a :class:`ClusterStore`."""

    def __init__(self, store: ClusterStore) -> None:
        self.store = store

    def find(self, doc_id: str) -> str:
        """Return the root of ``doc_id``'s cluster, compressing the path on the way."""
        path = []
        node = doc_id
        parent = self.store.get_parent(node)
        while parent is not None:
            path.append(node)
            node = parent
            parent = self.store.get_parent(node)
            if len(path) % _CYCLE_CHECK_EVERY == 0 and len(set(path)) < len(path):
                raise StateMismatchError(
                    f"the union-find parent records of {doc_id!r} form a cycle: the state was written by two "
                    "deciders at once; rebuild it (a new state, or the embedded command over the corpus)"
                )
        for member in path[:-1]:
            self.store.set_parent(member, node)
        return node

    def roots_of(self, doc_ids: Iterable[str]) -> list[str]:
        """The distinct roots of ``doc_ids``, in the order first met: :meth:`find` of each, with the same writes.

        A document whose parent is a root already met (every member of a compressed cluster)
        is not looked up again: :meth:`find` would return that root and compress nothing.
        """
        roots: dict[str, None] = {}
        get_parent = self.store.get_parent
        for doc_id in doc_ids:
            parent = get_parent(doc_id)
            if (doc_id if parent is None else parent) not in roots:
                roots.setdefault(self.find(doc_id))
        return list(roots)

    def info(self, root: str) -> ClusterInfo:
        """The cluster record of a root (synthesised for a singleton)."""
        found = self.store.get_cluster(root)
        if found is not None:
            return found
        return ClusterInfo(size=1, label=root, canonical=self.store.canonical_key(root))

    def cluster_of(self, doc_id: str) -> ClusterInfo:
        """The cluster record of any document."""
        return self.info(self.find(doc_id))

    def union(self, a: str, b: str) -> MergeResult:
        """Join the clusters of ``a`` and ``b`` and return what changed."""
        root_a, root_b = self.find(a), self.find(b)
        return self.union_roots(root_a, self.info(root_a), root_b, self.info(root_b))

    def union_roots(self, root_a: str, info_a: ClusterInfo, root_b: str, info_b: ClusterInfo) -> MergeResult:
        """:meth:`union` of two roots whose records the caller has (``info``: :meth:`info` of each, current)."""
        if root_a == root_b:
            return MergeResult(root_a, (info_a, info_a), info_a)
        if (info_a.size, root_b) < (info_b.size, root_a):
            root_a, root_b, info_a, info_b = root_b, root_a, info_b, info_a
        merged = ClusterInfo(
            size=info_a.size + info_b.size,
            label=min(info_a.label, info_b.label),
            canonical=better(info_a.canonical, info_b.canonical),
        )
        self.store.set_parent(root_b, root_a)
        self.store.set_cluster(root_b, None)
        self.store.set_cluster(root_a, merged)
        return MergeResult(root_a, (info_a, info_b), merged)


class MemoryClusterStore:
    """A dict-backed :class:`ClusterStore` (tests, tools)."""

    def __init__(self) -> None:
        self.parents: dict[str, str] = {}
        self.clusters: dict[str, ClusterInfo] = {}
        self.keys: dict[str, CanonicalKey] = {}

    def get_parent(self, doc_id: str) -> str | None:
        """See :class:`ClusterStore`."""
        return self.parents.get(doc_id)

    def set_parent(self, doc_id: str, parent: str | None) -> None:
        """See :class:`ClusterStore`."""
        if parent is None:
            self.parents.pop(doc_id, None)
        else:
            self.parents[doc_id] = parent

    def get_cluster(self, root: str) -> ClusterInfo | None:
        """See :class:`ClusterStore`."""
        return self.clusters.get(root)

    def set_cluster(self, root: str, info: ClusterInfo | None) -> None:
        """See :class:`ClusterStore`."""
        if info is None:
            self.clusters.pop(root, None)
        else:
            self.clusters[root] = info

    def canonical_key(self, doc_id: str) -> CanonicalKey:
        """See :class:`ClusterStore`."""
        return self.keys[doc_id]
