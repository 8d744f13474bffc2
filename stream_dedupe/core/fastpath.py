"""The batch fast path: documents that can only be ``new`` singletons, decided together.

Most documents of a crawl have no earlier version, no exact-content twin and no LSH candidate.
For those the per-document path (:meth:`DedupeEngine._decide`) reads nothing that can change the
outcome: the document becomes an indexed singleton representative and its one event is ``new``.
:func:`classify` finds them for a whole batch with two compiled calls over the batch's band hashes
(:meth:`~stream_dedupe.core.lshindex.LshIndex.any_match` against the index,
:func:`~stream_dedupe.core.bandindex.earlier_twins` within the batch), and :func:`decide_new`
indexes all of them with one compiled insertion and one overlay write per namespace.

A document is *fast* only when the per-document path would provably see the same thing at its
turn: its id occurs nowhere earlier in the batch and is not in the state; its identity key is
not in the state and not earlier in the batch; no indexed document shares a band with it and no
earlier document of the batch does either (whatever became of that one). Documents decided
earlier in the batch only remove band entries, or re-add the same bands under another member of
the same content group, or add their own bands (covered by the in-batch check), so "no candidate
at the start of the batch and none in the batch before it" means "no candidate at its turn".
Anything else goes through the exact per-document path. ``tests/test_golden_events.py`` holds
the events of both paths byte-identical to those of the per-document engine.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from stream_dedupe.core import events as ev
from stream_dedupe.core.bandindex import earlier_twins
from stream_dedupe.core.batch import Prepared
from stream_dedupe.core.lshindex import LshIndex
from stream_dedupe.core.records import Deletion, Document, Invalid, Record
from stream_dedupe.core.rows import stack_rows
from stream_dedupe.storage.state import DocRecord, StateView


def classify(records: Sequence[Record], prepared: Sequence[Prepared], state: StateView, lsh: LshIndex) -> list[bool]:
    """Per prepared document (in order): True if it can only be a ``new`` singleton.

    Args:
        records: The batch's records (documents, deletions, invalid ones) in order.
        prepared: The batch's documents as prepared, in the order of ``records``; their state
            reads (``docs``, ``exact``) must have been prefetched.
        state: The state view.
        lsh: The band tables as they are at the start of the batch.

    """
    fast = [False] * len(prepared)
    seen_ids: set[str] = set()
    seen_keys: set[bytes] = set()
    rows: list[int] = []
    k = 0
    for record in records:
        if isinstance(record, Document):
            item = prepared[k]
            doc_id, key = record.doc_id, item.content_hash
            if (
                item.tokens > 0
                and item.band_hashes is not None
                and doc_id not in seen_ids
                and key not in seen_keys
                and state.get("docs", doc_id.encode("utf-8")) is None
                and state.get("exact", key) is None
            ):
                fast[k] = True
            if item.band_hashes is not None:
                rows.append(k)
            seen_ids.add(doc_id)
            seen_keys.add(key)
            k += 1
        elif isinstance(record, Deletion | Invalid) and record.doc_id is not None:
            seen_ids.add(record.doc_id)
    if rows:
        hashes = stack_rows([prepared[i].band_hashes for i in rows])  # type: ignore[misc]
        taken = lsh.any_match(hashes) | earlier_twins(hashes)
        for i, hit in zip(rows, taken.tolist(), strict=True):
            if hit:
                fast[i] = False
    return fast


def decide_new(items: Sequence[Prepared], state: StateView, lsh: LshIndex, counters: Counter[str]) -> list[ev.Event]:
    """Decide documents classified fast by :func:`classify`: index them, stage their state, one ``new`` event each.

    The whole batch's fast documents can be decided before any other record of the batch: a
    record before a fast document shares with it no id, no identity key and no band key, so it
    reads nothing a fast document writes (and a fast document reads nothing at all).
    """
    if not items:
        return []
    ids = [p.doc.doc_id for p in items]
    lsh.add_new(ids, stack_rows([p.band_hashes for p in items]))  # type: ignore[misc]
    state.put_new_exact_groups([p.content_hash for p in items], ids)
    encode = DocRecord.encode_representative
    state.put_new_documents(
        ids,
        [p.doc.raw for p in items],
        [
            encode(
                p.content_hash,
                p.length,
                p.doc.updated_at_us,
                p.tokens,
                True,
                p.doc.source,
                p.title_key,
                p.fingerprint,
                p.epoch,
            )
            for p in items
        ],
        stack_rows([p.signature for p in items]),  # type: ignore[misc]
        [p.shingle_set for p in items],
    )
    n = len(items)
    counters["documents"] += n
    counters["new"] += n
    # the per-document path's counters, present even when zero (the stats match it key for key)
    counters["hot_bucket_skips"] += 0
    counters["candidates"] += 0
    return ev.new_singleton_events(ids)
