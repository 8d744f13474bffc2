"""Event constructors: the JSON objects of ``schema/events.schema.json``."""

from __future__ import annotations

from collections import Counter
from typing import Any

from stream_dedupe.core.cover import CoverChange
from stream_dedupe.core.unionfind import ClusterInfo

Event = dict[str, Any]

#: Version of the event schema (``schema/events.schema.json``); 2 added representatives.
SCHEMA_VERSION = 2

#: Events of which exactly one is emitted per input record.
DOCUMENT_EVENTS = ("new", "duplicate-of", "unchanged", "deleted", "invalid")


def document_event(
    kind: str,
    doc_id: str,
    cluster: ClusterInfo,
    of: str | None = None,
    similarity: float | None = None,
    exact: bool = False,
    representative: str | None = None,
    threshold: float | None = None,
) -> Event:
    """A ``new``, ``duplicate-of`` or ``unchanged`` event.

    Args:
        kind: The event name.
        doc_id: The document.
        cluster: Its cluster (union-find component) after the decision.
        of: For ``duplicate-of``: the representative that covers the document.
        similarity: Verified similarity to ``of``.
        exact: True if the normalized texts are identical.
        representative: Who holds the document's place in the index (None: the document itself).
        threshold: For ``duplicate-of``: the threshold that decided the pair.

    """
    event: Event = {
        "event": kind,
        "id": doc_id,
        "of": of,
        "similarity": None if similarity is None else round(similarity, 6),
        "exact": exact,
        "cluster": cluster.label,
        "canonical": cluster.canonical.doc_id,
        "cluster_size": cluster.size,
        "representative": representative or doc_id,
        "updated": False,
    }
    if threshold is not None:
        event["threshold"] = threshold
    return event


def new_singleton_events(doc_ids: list[str]) -> list[Event]:
    """The ``new`` events of documents that are singletons of their own (the batch fast path).

    The same events :func:`document_event` gives for a one-document cluster, built without a
    cluster record per document.
    """
    return [
        {
            "event": "new",
            "id": doc_id,
            "of": None,
            "similarity": None,
            "exact": False,
            "cluster": doc_id,
            "canonical": doc_id,
            "cluster_size": 1,
            "representative": doc_id,
            "updated": False,
        }
        for doc_id in doc_ids
    ]


def cover_events(cause: str, changes: list[CoverChange], counters: Counter[str]) -> list[Event]:
    """One ``cover-changed`` event for the documents other than ``cause`` whose place in the index changed.

    None when only ``cause`` changed; ``counters["cover_changes"]`` counts the documents that
    entered or left the index.
    """
    others = [c for c in changes if c.doc_id != cause]
    counters["cover_changes"] += sum(c.flipped for c in others)
    return [cover_changed(cause, others)] if others else []


def cover_changed(cause: str, changes: list[CoverChange]) -> Event:
    """Documents other than ``cause`` whose place in the index changed.

    ``entered``: they are representatives now (publish them); ``left``: they are covered now
    (drop them); ``moved``: still covered, by another representative.
    """

    def covered(change: CoverChange) -> dict[str, Any]:
        assert change.after is not None
        return {"id": change.doc_id, "representative": change.after[0], "similarity": round(change.after[1], 6)}

    ordered = sorted(changes, key=lambda change: change.doc_id)
    return {
        "event": "cover-changed",
        "id": cause,
        "entered": [c.doc_id for c in ordered if c.after is None],
        "left": [covered(c) for c in ordered if c.after is not None and c.before is None],
        "moved": [covered(c) for c in ordered if c.after is not None and c.before is not None],
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
