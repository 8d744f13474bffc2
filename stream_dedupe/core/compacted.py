"""What a batch's events change in the set of canonical documents (the compacted canonical topic)."""

from __future__ import annotations

from collections.abc import Sequence

from stream_dedupe.core import events as ev
from stream_dedupe.storage.state import StateView


def canonical_updates(state: StateView, events: Sequence[ev.Event]) -> list[tuple[str, bytes | None]]:
    """``(id, original JSON)`` for each document the events made a canonical, ``(id, None)`` for each that left.

    Read from the batch's state view after the events were decided and before the commit; in
    order and once per id (see :meth:`~stream_dedupe.core.engine.DedupeEngine.canonical_updates`).
    """
    touched: dict[str, None] = {}
    for event in events:
        kind = event["event"]
        if kind in ("new", "duplicate-of", "deleted") or (kind == "invalid" and event["reason"] == "empty-text"):
            # duplicate-of: a tombstone too when the id was a representative before (a re-crawl)
            touched.pop(event["id"], None)
            touched[event["id"]] = None
        elif kind == "cover-changed":
            for doc_id in (*event["entered"], *(left["id"] for left in event["left"])):
                touched.pop(doc_id, None)
                touched[doc_id] = None
        elif kind in ("canonical-changed", "cluster-split"):
            for doc_id in (
                event["previous"],
                event.get("canonical"),
                *(p["canonical"] for p in event.get("clusters", ())),
            ):
                if doc_id is not None:
                    touched.pop(doc_id, None)
                    touched[doc_id] = None
    updates: list[tuple[str, bytes | None]] = []
    for doc_id in touched:
        record = state.doc(doc_id)
        indexed = record is not None and record.representative
        updates.append((doc_id, state.document_json(doc_id) if indexed else None))
    return updates
