"""Reading results out of a committed state: clusters and canonical documents."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass

from stream_dedupe.core.unionfind import ClusterInfo, UnionFind
from stream_dedupe.storage.base import KVStore
from stream_dedupe.storage.state import StateView


@dataclass(frozen=True)
class ClusterSummary:
    """Counts over all clusters of a state.

    Attributes:
        documents: Documents in the state.
        clusters: Clusters, singletons included (= canonical documents).
        with_duplicates: Clusters of two or more.
        largest: Size of the largest cluster.

    """

    documents: int
    clusters: int
    with_duplicates: int
    largest: int


def summarize(store: KVStore) -> ClusterSummary:
    """Count documents and clusters (scans the cluster records, not every document)."""
    view = StateView(store)
    documents = sum(1 for _ in store.items("docs"))
    sizes = [info.size for info in _cluster_records(view)]
    merged_away = sum(size - 1 for size in sizes)
    return ClusterSummary(documents, documents - merged_away, len(sizes), max(sizes, default=1 if documents else 0))


def _cluster_records(view: StateView) -> Iterator[ClusterInfo]:
    for key, _ in view.store.items("clusters"):
        info = view.get_cluster(key.decode("utf-8"))
        if info is not None:
            yield info


def iter_clusters(store: KVStore, min_size: int = 2) -> Iterator[dict[str, object]]:
    """Clusters as ``{"cluster", "canonical", "size", "members"}``, ordered by label.

    Args:
        store: A committed state.
        min_size: Smallest cluster to yield (1 includes singletons).

    """
    view = StateView(store)
    uf = UnionFind(view)
    members: dict[str, list[str]] = defaultdict(list)
    for key, _ in store.items("parent"):
        doc_id = key.decode("utf-8")
        members[uf.find(doc_id)].append(doc_id)
    clusters = []
    for key, _ in store.items("clusters"):
        root = key.decode("utf-8")
        info = uf.info(root)
        clusters.append((info, sorted([root, *members[root]])))
    if min_size <= 1:
        for doc_id in _singletons(view):
            clusters.append((uf.info(doc_id), [doc_id]))
    clusters.sort(key=lambda c: c[0].label)
    for info, ids in clusters:
        if info.size >= min_size:
            yield {
                "cluster": info.label,
                "canonical": info.canonical.doc_id,
                "size": info.size,
                "members": ids,
            }


def _singletons(view: StateView) -> Iterator[str]:
    grouped = {k for k, _ in view.store.items("parent")} | {k for k, _ in view.store.items("clusters")}
    for key, _ in view.store.items("docs"):
        if key not in grouped:
            yield key.decode("utf-8")


def iter_canonical_documents(store: KVStore) -> Iterator[bytes]:
    """The original JSON of every canonical document (one per cluster), ordered by id."""
    view = StateView(store)
    canonicals = {info.canonical.doc_id for info in _cluster_records(view)}
    canonicals.update(_singletons(view))
    for doc_id in sorted(canonicals):
        raw = view.document_json(doc_id)
        if raw is not None:
            yield raw
