"""Recognizing an unchanged re-crawl without reading its text again.

A crawler sends the same pages again and again, most of them unchanged. Deciding that a page is
``unchanged`` means computing its identity key (the hash of its normalized text once the learned
boilerplate lines are stripped, with its title under the title guard) and finding the stored
record's key equal: the line pass over the whole text, normalization and hashing, about two
thirds of what an unchanged re-crawl cost (BENCHMARKS.md, "Re-crawls and deletions").

Every record written since version 4 also keeps a *fingerprint* of the text, title and source it
was derived from (:func:`text_fingerprint`) and the *epoch* of the learned lines it was stripped
with: how many lines had been learned for its source then (a line's key includes its source, so
no other source's lines can strip it). Learned lines are never forgotten (a line's count only
grows), so two equal epochs of one source mean the same learned lines, and a text with the same
fingerprint stripped with the same lines has the same identity key. So a re-crawl whose
fingerprint and epoch (at its turn in the batch) equal its record's is decided ``unchanged``
from the record alone (:func:`recognized`), exactly as the full path would decide it.

The invariant that makes it exact: a record's ``content_hash``, ``fingerprint`` and ``epoch``
are always written together, from one text (the engine's ``_decide``, the batch fast path, a
carrier signed again, and an ``unchanged`` decision that refreshes the two fields when it read
the text anyway). A record of an older version has no fingerprint and takes the full path, once.

**Counted texts need no epoch.** The epoch is conservative: a line learned for a source makes
every record of that source older than it, although most of their texts do not hold the line.
A document decided for the first time has its text *counted*: each of its lines not learned yet
names the document among its carriers, and when such a line is learned every carrier is signed
and decided again (:func:`~stream_dedupe.core.retroactive.resign_carriers`) and its record rewritten. So a record
written from a counted text is current whatever is learned later: a line its text holds makes it
a carrier and rewrites it, a line it does not hold strips nothing from it. Its epoch is
:data:`~stream_dedupe.storage.docrecord.COUNTED`, kept while the record is rewritten from the
same text (an ``unchanged`` decision, a carrier signed again); a changed re-crawl is not counted
(re-crawling a page never makes its own lines boilerplate), so its record keeps a plain epoch.
Between a line's learning and the end of its batch, when the carriers are signed again, a
carrier's record is not current yet: :func:`current` is checked with the batch's pending carriers
at each document's turn. A carrier that cannot be signed again (no words would be left) has its
record marked :data:`~stream_dedupe.storage.docrecord.STALE`, read in full at its next re-crawl.
A release before this one compares a counted record's epoch with its own and reads the text once.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Collection, Sequence

import mmh3

from stream_dedupe.core.records import Document
from stream_dedupe.core.retention import later
from stream_dedupe.storage.docrecord import COUNTED
from stream_dedupe.storage.state import DocRecord, StateView


def _field(value: str | None) -> str:
    """A length-prefixed field (``-`` for None), so that no two (title, source) pairs read alike."""
    return "-" if value is None else f"{len(value)}:{value}"


def text_fingerprint(doc: Document) -> bytes:
    """8 bytes of MurmurHash3 over what a document's identity key is derived from: text, title, source.

    ``updated_at`` and the other fields of the JSON are not part of it (they change no identity
    key). A changed page that collides with its own previous fingerprint would be decided
    ``unchanged``: odds of 2^-64 a re-crawl.
    """
    text = mmh3.hash_bytes(doc.text.encode("utf-8", "surrogatepass"))
    head = f"{_field(doc.source)}{_field(doc.title)}".encode("utf-8", "surrogatepass")
    return mmh3.hash_bytes(head + text)[:8]


def current(prior: DocRecord | None, fingerprint: bytes, epoch: int) -> bool:
    """True if ``prior`` was derived from the text of ``fingerprint`` stripped as it would be now.

    ``epoch``: the lines learned for the document's source now. A counted record
    (:data:`~stream_dedupe.storage.docrecord.COUNTED`) is current at any epoch, except while its
    document waits to be signed again as a carrier of a line learned in the batch (the caller
    checks that at the document's turn).
    """
    return prior is not None and prior.fingerprint == fingerprint and epoch_current(prior.epoch, epoch)


def epoch_current(record_epoch: int, epoch: int) -> bool:
    """True if a record stripped at ``record_epoch`` strips alike at ``epoch`` (see :func:`current`)."""
    return record_epoch in (epoch, COUNTED)


def carried_epoch(prior: DocRecord | None, fingerprint: bytes, epoch: int) -> int:
    """The epoch of a carrier's record signed again now: counted still if it is the counted text, else ``epoch``."""
    counted = prior is not None and prior.epoch == COUNTED and prior.fingerprint == fingerprint
    return COUNTED if counted else epoch


def named_once(docs: Sequence[Document], removed: Collection[str]) -> set[str]:
    """Ids of ``docs`` that no other record of the batch names (no second version, no deletion).

    Only such a document's stored record is the one it meets at its turn: an earlier record of
    the batch may change or remove the others'.
    """
    counts = Counter(d.doc_id for d in docs)
    return {doc_id for doc_id, n in counts.items() if n == 1 and doc_id not in removed}


def recognized(
    state: StateView,
    docs: Sequence[Document],
    fingerprints: Sequence[bytes],
    epochs: Sequence[int],
    alone: Collection[str],
) -> list[DocRecord | None]:
    """Per document: its record when it is an unchanged re-crawl that needs no text read, else None.

    Args:
        state: The state view (the documents' records prefetched).
        docs: The batch's documents.
        fingerprints: Their :func:`text_fingerprint`.
        epochs: Lines learned for each document's source at the start of the batch (0 without
            learning). A line learned in the batch before a document's turn changes what its
            text strips to: the caller checks the epoch again at its turn.
        alone: :func:`named_once` of the batch: only those can be recognized.

    """
    out: list[DocRecord | None] = []
    for doc, fingerprint, epoch in zip(docs, fingerprints, epochs, strict=True):
        prior = state.doc(doc.doc_id) if doc.doc_id in alone else None
        out.append(prior if current(prior, fingerprint, epoch) else None)
    return out


def current_recrawls(
    state: StateView,
    docs: Sequence[Document],
    removed: Collection[str],
    epoch: Callable[[str | None], int],
) -> list[bool]:
    """Per document: True when its committed record says it is an unchanged re-crawl right now.

    A hint for a stage that signs ahead of the decisions (the worker's sign stage): such a
    document need not be signed, since the batch that decides it will most likely recognize it
    (:func:`recognized`, checked again at its turn). A hint that turns out wrong costs only the
    signing it meant to save: the deciding batch signs what it does not recognize.

    Args:
        state: The state view (read as committed: :meth:`StateView.committed_docs`).
        docs: Documents about to be signed.
        removed: Ids that other records of the same lot delete.
        epoch: Lines learned so far for a source (``BatchPreparer.epoch``).

    """
    alone = named_once(docs, removed)
    ids = [d.doc_id for d in docs if d.doc_id in alone]
    records = dict(zip(ids, state.committed_docs(ids), strict=True)) if ids else {}
    return [current(records.get(doc.doc_id), text_fingerprint(doc), epoch(doc.source)) for doc in docs]


def recrawled(prior: DocRecord, fingerprint: bytes | None, epoch: int, updated_at_us: int | None) -> DocRecord:
    """The record of an unchanged re-crawl (same content as ``prior``): ``prior`` itself if nothing changes.

    Read in full, its text gives the stored key (``fingerprint``, ``epoch``): the next re-crawl
    need not read it. Still current as of this crawl, retention measures its age from this
    crawl's ``updated_at_us`` (the content's ``updated_at``, which orders canonicals, stays).
    """
    record = prior
    if fingerprint is not None and not current(prior, fingerprint, epoch):
        record = dataclasses.replace(record, fingerprint=fingerprint, epoch=epoch)
    if later(updated_at_us, record.age_from_us) and record.fingerprint is not None:
        record = dataclasses.replace(record, seen_at_us=updated_at_us)
    return record
