"""Reading results out of a committed state: clusters, their representatives, the indexed documents."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass

from stream_dedupe.core.unionfind import UnionFind
from stream_dedupe.storage.base import KVStore
from stream_dedupe.storage.state import DocRecord, StateView, decode_cluster


@dataclass(frozen=True)
class ClusterSummary:
    """Counts over all clusters of a state.

    Attributes:
        documents: Documents in the state.
        clusters: Clusters, singletons included.
        with_duplicates: Clusters of two or more.
        largest: Size of the largest cluster.
        representatives: Documents in the indexed set (each dropped document is covered by one).
        largest_cover: Most documents held by one representative (itself included).

    """

    documents: int
    clusters: int
    with_duplicates: int
    largest: int
    representatives: int = 0
    largest_cover: int = 0


def summarize(store: KVStore) -> ClusterSummary:
    """Count documents, clusters and representatives (one scan of the document records)."""
    documents = 0
    covers: Counter[str] = Counter()
    for _, raw in store.items("docs"):
        documents += 1
        covered_by = DocRecord.covered_by_of(raw)
        if covered_by is not None:
            covers[covered_by] += 1
    # decoded from the scan itself (one read a cluster was 60% of the summary of a large state)
    sizes = [decode_cluster(raw).size for _, raw in store.items("clusters")]
    merged_away = sum(size - 1 for size in sizes)
    return ClusterSummary(
        documents,
        documents - merged_away,
        len(sizes),
        max(sizes, default=1 if documents else 0),
        documents - sum(covers.values()),
        max(covers.values(), default=0) + 1 if documents else 0,
    )


def iter_clusters(store: KVStore, min_size: int = 2) -> Iterator[dict[str, object]]:
    """Clusters as ``{"cluster", "canonical", "size", "members", "representatives", "covered_by"}``.

    Ordered by label. ``representatives`` are the members kept in the index; ``covered_by`` maps
    every other member to the representative that holds its place (a verified near-duplicate).

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
            records = dict(zip(ids, view.store.get_many("docs", [i.encode("utf-8") for i in ids]), strict=True))
            covered = {}
            for doc_id, raw in records.items():
                rep = None if raw is None else DocRecord.decode(raw).covered_by
                if rep is not None:
                    covered[doc_id] = rep
            yield {
                "cluster": info.label,
                "canonical": info.canonical.doc_id,
                "size": info.size,
                "members": ids,
                "representatives": [i for i in ids if i not in covered],
                "covered_by": covered,
            }


def _singletons(view: StateView) -> Iterator[str]:
    grouped = {k for k, _ in view.store.items("parent")} | {k for k, _ in view.store.items("clusters")}
    for key, _ in view.store.items("docs"):
        if key not in grouped:
            yield key.decode("utf-8")


def iter_representative_ids(store: KVStore) -> Iterator[str]:
    """Ids of the indexed set: every document no representative covers, in key order."""
    for key, raw in store.items("docs"):
        if DocRecord.covered_by_of(raw) is None:
            yield key.decode("utf-8")


def iter_canonical_documents(store: KVStore) -> Iterator[bytes]:
    """The original JSON of every representative (the deduped set), ordered by id.

    Every dropped document is verified-similar to the representative that covers it; a cluster
    may keep several representatives when its members chain through pairs that are not
    near-duplicates of each other (:mod:`stream_dedupe.core.cover`).

    One pass over the records and one over the originals, side by side (both in key order; UTF-8
    bytes sort as the ids do): a point read per representative decompressed a ``documents``
    block each time (measured: 0.15-0.23 s of CPU for 14,000 representatives of 20,000, 0.05-0.13 s this way).
    """
    documents = store.items("documents")
    pending = next(documents, None)
    for key, raw in store.items("docs"):
        if DocRecord.covered_by_of(raw) is not None:
            continue
        while pending is not None and pending[0] < key:
            pending = next(documents, None)
        if pending is not None and pending[0] == key:
            yield pending[1]
