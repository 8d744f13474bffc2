"""Typed results of the Python API (:mod:`stream_dedupe.api`) and the conversion of its inputs.

A :class:`Decision` is built from the engine's events (README, "Events"); a :class:`QueryResult`
is what :meth:`~stream_dedupe.api.Deduper.query` answers without changing the state.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson

from stream_dedupe.core.events import DOCUMENT_EVENTS, Event

#: What :meth:`~stream_dedupe.api.Deduper.add` accepts as one document.
DocumentLike = Mapping[str, Any] | tuple[str, str] | Any


@dataclass(frozen=True)
class Decision:
    """What happened to one document (built from its document event).

    Attributes:
        kind: ``new``, ``duplicate-of``, ``unchanged``, ``deleted`` or ``invalid`` (the event name).
        id: The document id (None for an invalid record whose id could not be read).
        representative: The document that holds this one's place in the index: itself for
            ``new``, the covering representative for ``duplicate-of`` (None for ``deleted`` and
            ``invalid``).
        similarity: Verified similarity to ``representative`` (``duplicate-of`` only).
        exact: True if the normalized texts (and titles, with the title guard) are identical.
        threshold: The pair threshold that decided a ``duplicate-of``.
        cluster: Label of the document's cluster (its smallest member id).
        canonical: The cluster's canonical document.
        cluster_size: Members of the cluster.
        updated: True when the id was known with other content.
        reason: For ``invalid``: the reason code; ``detail`` says how to fix it.
        detail: For ``invalid``: a sentence.
        seq: The event's sequence number (None for a query's would-be decision).
        events: Every engine event of this record (its document event first, then the cluster and
            cover events it caused; for the last record of a batch, also the re-decisions of
            earlier documents that newly learned boilerplate caused).

    """

    kind: str
    id: str | None
    representative: str | None = None
    similarity: float | None = None
    exact: bool = False
    threshold: float | None = None
    cluster: str | None = None
    canonical: str | None = None
    cluster_size: int | None = None
    updated: bool = False
    reason: str | None = None
    detail: str | None = None
    seq: int | None = None
    events: tuple[Event, ...] = field(default=(), repr=False, compare=False)

    @property
    def duplicate(self) -> bool:
        """True for a ``duplicate-of`` (the document is dropped from the deduped set)."""
        return self.kind == "duplicate-of"

    @property
    def kept(self) -> bool:
        """True if the document is in the deduped set (``new``, or an ``unchanged`` representative)."""
        return self.kind in ("new", "unchanged") and self.representative == self.id

    @classmethod
    def from_event(cls, event: Event, events: Iterable[Event] = ()) -> Decision:
        """The decision a document event records."""
        kind = event["event"]
        known = kind in ("new", "duplicate-of", "unchanged")
        return cls(
            kind=kind,
            id=event.get("id"),
            representative=event.get("representative") if known else None,
            similarity=event.get("similarity"),
            exact=bool(event.get("exact", False)),
            threshold=event.get("threshold"),
            cluster=event.get("cluster"),
            canonical=event.get("canonical"),
            cluster_size=event.get("cluster_size"),
            updated=bool(event.get("updated", False)),
            reason=event.get("reason"),
            detail=event.get("detail"),
            seq=event.get("seq"),
            events=tuple(events) or (event,),
        )


@dataclass(frozen=True)
class Match:
    """A document of the state that a queried text has a verified pair with.

    Attributes:
        id: The document id.
        similarity: Verified similarity (exact Jaccard with ``verify="exact"``, else the MinHash
            estimate; always the estimate for :meth:`~stream_dedupe.api.Deduper.query_minhash`).
        exact: True if its normalized text is identical to the query's.
        representative: True if the document is in the deduped set (it can cover the query).
        threshold: The pair threshold the similarity was held to.

    """

    id: str
    similarity: float
    exact: bool
    representative: bool
    threshold: float


@dataclass(frozen=True)
class QueryResult:
    """The would-be decision of a text, and what it matched; nothing was written.

    Attributes:
        decision: What :meth:`~stream_dedupe.api.Deduper.add` would decide now for the document
            (``seq`` and ``events`` are empty).
        matches: Verified pairs at or above their threshold, most similar first.

    """

    decision: Decision
    matches: tuple[Match, ...]

    @property
    def duplicate(self) -> bool:
        """True if adding the document now would drop it (a representative covers it)."""
        return self.decision.duplicate


@dataclass(frozen=True)
class Cluster:
    """A cluster of the state (:func:`stream_dedupe.exports.iter_clusters`).

    Attributes:
        label: Smallest member id.
        canonical: The preferred member (always a representative).
        size: Members.
        members: Member ids, sorted.
        representatives: Members kept in the deduped set.
        covered_by: Every other member -> the representative that covers it.

    """

    label: str
    canonical: str
    size: int
    members: tuple[str, ...]
    representatives: tuple[str, ...]
    covered_by: Mapping[str, str]

    @classmethod
    def from_export(cls, exported: Mapping[str, object]) -> Cluster:
        """A cluster from one dict of :func:`stream_dedupe.exports.iter_clusters`."""
        covered = exported["covered_by"]
        return cls(
            str(exported["cluster"]),
            str(exported["canonical"]),
            int(str(exported["size"])),
            tuple(_strings(exported["members"])),
            tuple(_strings(exported["representatives"])),
            {str(k): str(v) for k, v in covered.items()} if isinstance(covered, dict) else {},
        )


def _strings(value: object) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


def split_events(events: list[Event]) -> list[list[Event]]:
    """Group a batch's events per record: each document event with the events that follow it."""
    groups: list[list[Event]] = []
    for event in events:
        if event["event"] in DOCUMENT_EVENTS or not groups:
            groups.append([event])
        else:
            groups[-1].append(event)
    return groups


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    isoformat = getattr(value, "isoformat", None)
    if callable(isoformat):
        return isoformat()
    item = getattr(value, "item", None)  # numpy and pandas scalars
    if callable(item):
        return item()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _missing(value: Any) -> bool:
    """None, NaN or pandas' NA/NaT (a DataFrame's empty cell)."""
    if value is None:
        return True
    if isinstance(value, float):
        return math.isnan(value)
    return type(value).__name__ in ("NAType", "NaTType")


def to_mapping(doc: DocumentLike) -> Mapping[str, Any]:
    """A document as a mapping: a dict, an ``(id, text)`` pair, or a pandas row (Series).

    Raises:
        TypeError: for anything else.

    """
    if isinstance(doc, Mapping):
        return doc
    if isinstance(doc, tuple) and len(doc) == 2:
        return {"id": doc[0], "text": doc[1]}
    to_dict = getattr(doc, "to_dict", None)
    if callable(to_dict):  # a pandas Series (one DataFrame row)
        value = to_dict()
        if isinstance(value, Mapping):
            return value
    raise TypeError(
        f"a document is a dict with 'id' and 'text', an (id, text) tuple or a DataFrame row, got {type(doc).__name__}"
    )


def to_json(doc: DocumentLike) -> bytes:
    """The JSON bytes the engine parses for one document (empty cells dropped).

    Raises:
        TypeError: if the document is not one of :data:`DocumentLike` or holds an unserializable value.

    """
    mapping = {str(k): v for k, v in to_mapping(doc).items() if not _missing(v)}
    try:
        return orjson.dumps(mapping, default=_json_default, option=orjson.OPT_SERIALIZE_NUMPY)
    except orjson.JSONEncodeError as exc:
        raise TypeError(f"document {mapping.get('id')!r} cannot be serialized to JSON: {exc}") from exc


def iter_documents(docs: Iterable[DocumentLike] | Any) -> Iterator[DocumentLike]:
    """The documents of an iterable, or the rows of a pandas DataFrame (as dicts)."""
    to_dict = getattr(docs, "to_dict", None)
    if hasattr(docs, "columns") and callable(to_dict):
        # iterating a DataFrame yields its column names: take its rows
        yield from to_dict(orient="records")
        return
    yield from docs
