"""Taking a document out of the index and its cluster (its content changed).

Union-find cannot split, so the verified edges are kept: the cluster the document leaves is
recomputed from the edges that remain, and may fall apart into several clusters, each with a
freshly elected canonical.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from stream_dedupe.core import events as ev
from stream_dedupe.core.canonical import choose
from stream_dedupe.core.lshindex import LshIndex
from stream_dedupe.core.unionfind import ClusterInfo, UnionFind
from stream_dedupe.storage.state import DocRecord, StateView


def detach(
    state: StateView,
    uf: UnionFind,
    lsh: LshIndex,
    doc_id: str,
    prior: DocRecord,
    band_hashes: np.ndarray | None = None,
) -> list[ev.Event]:
    """Remove ``doc_id``'s index entries and edges; rebuild what remains of its cluster.

    Args:
        state: The state view.
        uf: Union-find over the same state.
        lsh: The band tables.
        doc_id: The document leaving.
        prior: Its current record.
        band_hashes: The band hashes of its stored signature when already computed (a batch
            computes them together), else None.

    Returns:
        ``cluster-split`` and ``canonical-changed`` events for the clusters left behind.

    """
    _leave_index(state, lsh, doc_id, prior, band_hashes)
    old = uf.cluster_of(doc_id)
    neighbours = state.edges(doc_id)
    if not neighbours:
        state.put_doc(doc_id, None)
        return []
    for other, _, _ in neighbours:
        state.put_edges(other, [e for e in state.edges(other) if e[0] != doc_id])
    state.put_edges(doc_id, [])
    components = _components(state, [other for other, _, _ in neighbours])
    for member in [doc_id, *(m for comp in components for m in comp)]:
        state.set_parent(member, None)
        state.set_cluster(member, None)
    state.put_doc(doc_id, None)
    parts = [_rebuild(state, uf, comp) for comp in components]
    events: list[ev.Event] = []
    if len(parts) > 1:
        events.append(
            ev.cluster_split(old.label, old.canonical.doc_id, list(zip(parts, components, strict=True)), doc_id)
        )
    for part in parts:
        if part.canonical.doc_id != old.canonical.doc_id:
            events.append(ev.canonical_changed(part, old.canonical.doc_id, doc_id))
    return events


def _leave_index(
    state: StateView, lsh: LshIndex, doc_id: str, prior: DocRecord, band_hashes: np.ndarray | None
) -> None:
    group = [m for m in state.exact_group(prior.content_hash) if m != doc_id]
    state.put_exact_group(prior.content_hash, group)
    signature = state.signature(doc_id)
    if prior.indexed and signature is not None:
        hashes = lsh.hashes(signature.reshape(1, -1))[0] if band_hashes is None else band_hashes
        lsh.remove(doc_id, hashes)
        state.put_skipped_bands(doc_id, None)
        if group:
            _, full = lsh.add(group[0], hashes)
            if full:
                state.put_skipped_bands(group[0], lsh.skipped_bands())
            _promote(state, doc_id, group[0], group)
    state.put_signature(doc_id, None)
    state.put_shingle_set(doc_id, None)
    state.put_document_json(doc_id, None)


def _promote(state: StateView, old: str, successor: str, group: list[str]) -> None:
    """``successor`` (same content as ``old``) now represents the group in the index.

    Documents that matched ``old`` match ``successor`` with the same similarity (same content),
    and the other group members are exact duplicates of it, so it inherits those edges.
    """
    record = state.doc(successor)
    assert record is not None
    state.put_doc(successor, dataclasses.replace(record, indexed=True))
    known = {e[0] for e in state.edges(successor)}
    new_edges = [(o, s, x) for o, s, x in state.edges(old) if o not in known and o != successor and o not in group]
    new_edges += [(m, 1.0, True) for m in group[1:] if m not in known]
    state.put_edges(successor, [*state.edges(successor), *new_edges])
    for other, similarity, exact in new_edges:
        state.put_edges(other, [*state.edges(other), (successor, similarity, exact)])


def _components(state: StateView, starts: list[str]) -> list[list[str]]:
    seen: set[str] = set()
    components = []
    for start in starts:
        if start in seen:
            continue
        seen.add(start)
        component, frontier = [start], [start]
        while frontier:
            node = frontier.pop()
            for other, _, _ in state.edges(node):
                if other not in seen:
                    seen.add(other)
                    component.append(other)
                    frontier.append(other)
        components.append(sorted(component))
    return components


def _rebuild(state: StateView, uf: UnionFind, members: list[str]) -> ClusterInfo:
    root = members[0]
    for member in members[1:]:
        state.set_parent(member, root)
    info = ClusterInfo(len(members), min(members), choose([state.canonical_key(m) for m in members]))
    if len(members) > 1:
        state.set_cluster(root, info)
    return info
