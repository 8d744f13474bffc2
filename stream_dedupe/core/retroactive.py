"""Retroactive learning: the documents that carried a line learned in a batch, decided again.

When a boilerplate line is learned (:mod:`~stream_dedupe.core.boilerplate`), the documents that
carried it before are read back from their stored original, stripped with the learned set as it
is now, signed and decided again, so that every document in the state is stripped alike
whatever the arrival order (docs/quality.md, "Learning is retroactive").
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable

from stream_dedupe.core import events as ev
from stream_dedupe.core.batch import BatchPreparer, Prepared
from stream_dedupe.core.boilerplate import BoilerplateLearner
from stream_dedupe.core.cover import CoverChange
from stream_dedupe.core.lshindex import LshIndex
from stream_dedupe.core.records import Document, ParseLimits, parse_keyed
from stream_dedupe.core.recrawl import carried_epoch, text_fingerprint
from stream_dedupe.core.signer import Signer
from stream_dedupe.storage.docrecord import COUNTED, STALE
from stream_dedupe.storage.state import DocRecord, StateView

#: A stored document was valid when it was decided: it is read again without bounds.
STORED_LIMITS = ParseLimits(1 << 40, 1 << 40, 1 << 40, 1 << 40)
#: Counters of document outcomes, which a carrier decided again does not count twice.
DOCUMENT_COUNTERS = ("documents", "replaced", "new", "new_in_cluster", "duplicates", "exact_duplicates")


def resign_carriers(
    learner: BoilerplateLearner,
    state: StateView,
    preparer: BatchPreparer,
    signer: Signer,
    lsh: LshIndex,
    counters: Counter[str],
    decide: Callable[[Prepared], list[ev.Event]],
) -> list[ev.Event]:
    """Sign and decide again the documents that carried lines learned in this batch.

    Their stored original is stripped with the learned set as it is now, so that every
    document in the state is stripped alike (learning is retroactive). A carrier decided
    again emits cluster and cover events (with its own id), never a second document event;
    one that would be left with no words (or cannot be read again) keeps its earlier version.

    Args:
        learner: The engine's boilerplate learner (its ``pending`` ids are taken and cleared).
        state: The state view.
        preparer: The engine's batch preparer.
        signer: The engine's signer.
        lsh: The band tables.
        counters: The engine's counters (``resigned`` counts the carriers decided again).
        decide: The engine's per-document decision.

    Returns:
        The cluster and cover events of the carriers decided again, in id order.

    """
    ids = sorted(learner.pending)
    learner.pending.clear()
    docs = []
    keys = [doc_id.encode("utf-8") for doc_id in ids]
    state.prefetch("documents", keys)
    state.prefetch("docs", keys)
    for doc_id in ids:
        raw = state.document_json(doc_id)
        # read as it was accepted: its id may be its Kafka key's (absent from the JSON), and
        # the worker's bounds may be wider than the defaults
        record = None if raw is None else parse_keyed(doc_id.encode("utf-8"), raw, STORED_LIMITS)
        if isinstance(record, Document):
            docs.append(record)
        else:
            kept_unsigned(state, doc_id, state.doc(doc_id))
    texts = [
        learner.strip_and_count(d.text, d.source, False, lines=lines)
        for d, lines in zip(docs, learner.batch_lines([d.text for d in docs], [d.source for d in docs]), strict=True)
    ]
    events: list[ev.Event] = []
    kept = {key: counters[key] for key in DOCUMENT_COUNTERS}
    fingerprints = [text_fingerprint(d) for d in docs]
    epochs = [
        carried_epoch(state.doc(d.doc_id), f, preparer.epoch(d.source)) for d, f in zip(docs, fingerprints, strict=True)
    ]
    items = preparer.keyed(docs, signer.sign(texts), lsh, fingerprints, epochs)
    state.prefetch("exact", [item.content_hash for item in items])
    preparer.prefetch_neighbours(items, lsh)
    for item in items:
        prior = state.doc(item.doc.doc_id)
        if item.tokens == 0:
            kept_unsigned(state, item.doc.doc_id, prior)
        if prior is None or prior.content_hash == item.content_hash or item.tokens == 0:
            continue
        counters["resigned"] += 1
        decided = decide(item)
        now = state.doc(item.doc.doc_id)
        assert now is not None
        events.extend(decided[1:])
        before = None if prior.covered_by is None else (prior.covered_by, prior.covered_similarity or 0.0)
        after = None if now.covered_by is None else (now.covered_by, now.covered_similarity or 0.0)
        if before != after:
            events.append(ev.cover_changed(item.doc.doc_id, [CoverChange(item.doc.doc_id, before, after)]))
    counters.update({key: value - counters[key] for key, value in kept.items()})
    return events


def kept_unsigned(state: StateView, doc_id: str, prior: DocRecord | None) -> None:
    """A carrier not signed again keeps its version, whose text holds a learned line.

    Counted, that version is current no more (:mod:`~stream_dedupe.core.recrawl`): its next
    re-crawl is read in full.
    """
    if prior is not None and prior.epoch == COUNTED:
        state.put_doc(doc_id, dataclasses.replace(prior, epoch=STALE))
