"""Event constructors: the JSON objects of ``schema/events.schema.json``."""

from __future__ import annotations

from typing import Any

from stream_dedupe.core.unionfind import ClusterInfo

Event = dict[str, Any]

#: Events of which exactly one is emitted per input record.
DOCUMENT_EVENTS = ("new", "duplicate-of", "unchanged", "deleted", "invalid")


def document_event(
    kind: str,
    doc_id: str,
    cluster: ClusterInfo,
    of: str | None = None,
    similarity: float | None = None,
    exact: bool = False,
) -> Event:
    """A ``new``, ``duplicate-of`` or ``unchanged`` event."""
    return {
        "event": kind,
        "id": doc_id,
        "of": of,
        "similarity": None if similarity is None else round(similarity, 6),
        "exact": exact,
        "cluster": cluster.label,
        "canonical": cluster.canonical.doc_id,
        "cluster_size": cluster.size,
    }


def deleted_event(doc_id: str, known: bool) -> Event:
    """A ``deleted`` event; ``known`` is False when the id was not in the state."""
    return {"event": "deleted", "id": doc_id, "known": known}


def invalid_event(doc_id: str | None, reason: str, detail: str, origin: dict[str, Any] | None) -> Event:
    """An ``invalid`` event; ``origin`` says where the record came from (file and line, or offset)."""
    event: Event = {"event": "invalid", "id": doc_id, "reason": reason, "detail": detail}
    event.update(origin or {})
    return event


def canonical_changed(cluster: ClusterInfo, previous: str, cause: str) -> Event:
    """The canonical of a cluster changed from ``previous`` to ``cluster.canonical``."""
    return {
        "event": "canonical-changed",
        "id": cause,
        "cluster": cluster.label,
        "canonical": cluster.canonical.doc_id,
        "previous": previous,
    }


def clusters_merged(cluster: ClusterInfo, merged: list[ClusterInfo], cause: str) -> Event:
    """Several clusters became ``cluster`` because document ``cause`` joined them."""
    return {
        "event": "clusters-merged",
        "id": cause,
        "cluster": cluster.label,
        "canonical": cluster.canonical.doc_id,
        "merged": sorted(info.label for info in merged),
        "previous_canonicals": sorted({info.canonical.doc_id for info in merged}),
    }


def cluster_split(label: str, previous_canonical: str, parts: list[tuple[ClusterInfo, list[str]]], cause: str) -> Event:
    """Cluster ``label`` fell apart into ``parts`` (each with its members) because ``cause`` left it."""
    return {
        "event": "cluster-split",
        "id": cause,
        "cluster": label,
        "previous": previous_canonical,
        "clusters": [
            {"cluster": p.label, "canonical": p.canonical.doc_id, "size": p.size, "members": members}
            for p, members in parts
        ],
    }
