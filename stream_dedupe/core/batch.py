"""Preparing a batch for the decisions: signatures, identity keys, band hashes, and the reads it needs.

The :class:`BatchPreparer` signs documents (or takes the records the worker's sign stage made),
strips learned boilerplate, derives the identity key (content hash, with the title when the
title guard is on), computes the LSH band hashes, and loads with one multi-get per namespace
what deciding the batch will read. An unchanged re-crawl whose fingerprint says so is prepared
from its stored record instead, its text neither stripped nor signed (:mod:`~stream_dedupe.core.recrawl`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

import mmh3
import numpy as np

from stream_dedupe.config import DedupeParams
from stream_dedupe.core.boilerplate import BoilerplateLearner, TextLines
from stream_dedupe.core.lshindex import LshIndex
from stream_dedupe.core.normalize import title_key
from stream_dedupe.core.records import Document
from stream_dedupe.core.recrawl import epoch_current, named_once, recognized, text_fingerprint
from stream_dedupe.core.rows import stack_rows
from stream_dedupe.core.signer import Signed, Signer
from stream_dedupe.storage.docrecord import COUNTED
from stream_dedupe.storage.state import (
    SKIPPED_BANDS_PREFIX,
    DocRecord,
    StateView,
)


@dataclass
class Prepared:
    """A document ready to be decided."""

    doc: Document
    content_hash: bytes
    length: int
    tokens: int
    title_key: str | None = None
    signature: np.ndarray | None = None
    band_hashes: np.ndarray | None = None
    shingle_set: np.ndarray | None = None
    #: :func:`~stream_dedupe.core.recrawl.text_fingerprint` of the document, stored in its record.
    fingerprint: bytes | None = None
    #: Boilerplate lines of its source learned when its text was stripped (the record's ``epoch``).
    epoch: int = 0


class BatchPreparer:
    """Turns a batch of documents into :class:`Prepared` ones.

    Args:
        params: Index parameters.
        state: The engine's state view.
        signer: Signs texts with ``params``.
        boilerplate: The learner, when boilerplate is learned.
        counters: The engine's counters (presigned records, stripped lines).

    """

    #: Decide unchanged re-crawls from their records when their fingerprints say so
    #: (:mod:`~stream_dedupe.core.recrawl`); False reads every text (the tests compare the two).
    recognize = True

    def __init__(
        self,
        params: DedupeParams,
        state: StateView,
        signer: Signer,
        boilerplate: BoilerplateLearner | None,
        counters: Counter[str],
    ) -> None:
        self.params = params
        self.state = state
        self.signer = signer
        self.boilerplate = boilerplate
        self.counters = counters
        # the band hashes of the stored signatures of documents this batch takes out, by id, with
        # the signature bytes they were computed from (prefetch_removals, old_band_hashes)
        self._old_hashes: dict[str, tuple[bytes, np.ndarray]] = {}

    def prepare(
        self,
        docs: list[Document],
        presigned: list[Signed | None],
        lsh: LshIndex,
        lines: Sequence[TextLines] | None = None,
        removed: Collection[str] = (),
    ) -> list[Prepared]:
        """Sign (or take the records signed elsewhere), key and band-hash a batch; load its records and groups.

        What the documents that take the per-document path read besides is loaded by
        :meth:`prefetch_neighbours`, once the fast path has taken the others.

        Args:
            docs: The batch's documents.
            presigned: Per document, its record signed elsewhere from the unstripped text, or None.
            lsh: The band tables (for the band hashes).
            lines: Per document, its boilerplate lines computed elsewhere
                (:func:`~stream_dedupe.core.boilerplate.text_lines` with these parameters), or
                None to compute them here.
            removed: Ids the batch's other records (deletions) take out: their documents are
                signed in full even when their content is stored.

        """
        self.state.prefetch("docs", [d.doc_id.encode("utf-8") for d in docs])
        fingerprints = [text_fingerprint(d) for d in docs]
        epochs = [self.epoch(d.source) for d in docs]
        alone = named_once(docs, removed)
        known: list[DocRecord | None] = [None] * len(docs)
        if self.recognize:
            known = recognized(self.state, docs, fingerprints, epochs, alone)
        signed = list(presigned)
        texts = [d.text for d in docs]
        if self.boilerplate is not None:
            # every document is counted; a record signed elsewhere (from the unstripped text) is
            # still right when no learned line was stripped from it: the common case
            texts, stripped = self.strip_boilerplate(docs, lines, known, epochs)
            signed = [None if cut else s for s, cut in zip(signed, stripped, strict=True)]
        todo = [i for i, s in enumerate(signed) if s is None and known[i] is None]
        if todo:
            stored = self._stored_as_is([docs[i] for i in todo], alone)
            for i, fresh in zip(todo, self.signer.sign([texts[i] for i in todo], stored), strict=True):
                signed[i] = fresh
        recognized_now = sum(1 for k in known if k is not None)
        self.counters["presigned"] += len(docs) - len(todo) - recognized_now
        if recognized_now:
            self.counters["recognized_unchanged"] += recognized_now
        prepared = self.keyed(docs, signed, lsh, fingerprints, epochs, known)
        # an unchanged re-crawl is decided from its own record: its content group is not read
        self.state.prefetch("exact", [p.content_hash for p in prepared if not _unchanged(self.state, p)])
        return prepared

    def epoch(self, source: str | None) -> int:
        """Boilerplate lines learned so far for ``source`` (0 without learning): see :mod:`.recrawl`."""
        return 0 if self.boilerplate is None else self.boilerplate.epoch(source)

    def _stored_as_is(self, signing: list[Document], alone: Collection[str]) -> Callable[[int, bytes], bool]:
        """For :meth:`Signer.sign`: True for a document whose stored record has this content (and title).

        Such a document is decided ``unchanged`` from its record alone (no signature is read),
        unless something earlier in the batch changes or removes its record: only a document of
        ``alone`` (:func:`~stream_dedupe.core.recrawl.named_once`) is answered True.
        """
        state = self.state

        def known(j: int, content_hash: bytes) -> bool:
            doc = signing[j]
            if doc.doc_id not in alone:
                return False
            prior = state.doc(doc.doc_id)
            return prior is not None and prior.content_hash == self.identity_key(content_hash, doc)[0]

        return known

    def identity_key(self, content_hash: bytes, doc: Document) -> tuple[bytes, str | None]:
        """A document's identity key (its content hash, with its title key under the title guard); its title key."""
        key = title_key(doc.title) if self.params.title_guard else None
        if key is not None:
            # the title is part of the identity: identical texts under different titles are distinct
            content_hash = mmh3.hash_bytes(content_hash + bytes.fromhex(key))
        return content_hash, key

    def keyed(
        self,
        docs: list[Document],
        signed: Sequence[Signed | None],
        lsh: LshIndex,
        fingerprints: Sequence[bytes] | None = None,
        epochs: Sequence[int] | None = None,
        known: Sequence[DocRecord | None] | None = None,
    ) -> list[Prepared]:
        """Documents with their signatures, identity keys and band hashes.

        Args:
            docs: The documents.
            signed: Their records (None only where ``known`` has the document's record).
            lsh: The band tables (for the band hashes).
            fingerprints: Their :func:`~stream_dedupe.core.recrawl.text_fingerprint`, when computed.
            epochs: The learned lines each text was stripped with (default: all learned now).
            known: Per document, the record of an unchanged re-crawl recognized by its fingerprint
                (:func:`~stream_dedupe.core.recrawl.recognized`): prepared from the record, unsigned.

        """
        prepared = []
        fingerprints = fingerprints if fingerprints is not None else [text_fingerprint(d) for d in docs]
        epochs = epochs if epochs is not None else [self.epoch(d.source) for d in docs]
        for i, (doc, record) in enumerate(zip(docs, signed, strict=True)):
            prior = known[i] if known is not None else None
            if prior is not None:
                item = Prepared(doc, prior.content_hash, prior.length, prior.tokens, prior.title_key)
            else:
                assert record is not None
                content_hash, key = self.identity_key(record.content_hash, doc)
                item = Prepared(doc, content_hash, record.length, record.tokens, key, record.signature)
                item.shingle_set = record.shingle_set
            item.fingerprint, item.epoch = fingerprints[i], epochs[i]
            prepared.append(item)
        with_sig = [p for p in prepared if p.signature is not None]
        if with_sig:
            band_hashes = lsh.hashes(stack_rows([p.signature for p in with_sig if p.signature is not None]))
            for entry, row in zip(with_sig, band_hashes, strict=True):
                entry.band_hashes = row
        return prepared

    def prefetch_neighbours(self, prepared: Sequence[Prepared], lsh: LshIndex, removed: Sequence[str] = ()) -> None:
        """Load, with one multi-get per namespace, what deciding ``prepared`` one by one will read.

        The documents already in the state that a batch document can match are its exact-content
        group and its LSH candidates; reading their records one by one was most of the engine's
        time on duplicate-heavy input. The documents' own union-find records and edges are read
        too (a re-crawl's old version is detached; a new one's are absent, one multi-get says so).
        What detaching a changed re-crawl's old version and the batch's deletions (``removed``,
        ids) reads is loaded by :meth:`prefetch_removals`.
        """
        state = self.state
        prepared_ids = {p.doc.doc_id for p in prepared}
        # A re-crawl whose content is unchanged reads only its own union-find records (its
        # ``unchanged`` event names its cluster): not its signature, group or candidates. The
        # common case of a periodic re-crawl; if an earlier record of the batch changes it
        # after all, its reads are single gets, the same values.
        changing = [p for p in prepared if not _unchanged(state, p)]
        changing_ids = {p.doc.doc_id for p in changing}
        same = [i.encode("utf-8") for i in prepared_ids - changing_ids]
        ids = set(changing_ids)
        # a changed re-crawl's old version leaves the index and its cluster, as a deletion does
        self.prefetch_removals([*changing_ids, *removed], lsh)
        signed = []
        for item in changing:
            head = state.exact_group_head(item.content_hash)
            if head is not None:
                ids.add(head)
            elif item.band_hashes is not None:
                signed.append(item.band_hashes)
        if signed:
            ids |= lsh.query_many(stack_rows(signed))
        # A batch document with no record in the state has no union-find records, edges or
        # signature there either (the engine's invariant, which ``_decide`` relies on too): no read.
        own = [
            k
            for k in (i.encode("utf-8") for i in prepared_ids)
            if state.get("docs", k) is None and not state.staged("docs", k)
        ]
        for key in own:
            for namespace in ("parent", "clusters", "edges"):
                state.mark_absent(namespace, key)
        keys = [i.encode("utf-8") for i in ids]
        absent = set(own)
        rest = [k for k in keys if k not in absent] if absent else keys
        state.prefetch("docs", keys)
        for namespace in ("parent", "clusters", "edges", "sets" if self.params.verify == "exact" else "sigs"):
            state.prefetch(namespace, rest)
        for namespace in ("parent", "clusters"):
            state.prefetch(namespace, same)
        keys += same
        # Their content groups (the cover reads a neighbour's group to expand it).
        records = (state.doc(i) for i in ids)
        state.prefetch("exact", list({r.content_hash for r in records if r is not None}))
        # Union-find roots of those documents (one level; paths are compressed as they are used).
        roots = {p for p in (state.get("parent", k) for k in keys) if p is not None}
        if roots:
            for namespace in ("docs", "parent", "clusters"):
                state.prefetch(namespace, list(roots))

    def prefetch_removals(self, doc_ids: Sequence[str], lsh: LshIndex) -> None:
        """Load with multi-gets what taking known documents out of the state reads (``detach``).

        Their records, signatures, kept skipped bands, content groups, union-find records and
        edges, and their neighbours' (a cluster left behind is recomputed from the edges); and
        the band hashes of their stored signatures, in one compiled call (:meth:`old_band_hashes`).
        Ids not in the state read nothing more than their record. One read each instead of one
        single get per key and document: a deletion took ~115 us, most of it single gets.
        """
        self._old_hashes = {}
        state = self.state
        ids = list(dict.fromkeys(doc_ids))
        if not ids:
            return
        state.prefetch("docs", [i.encode("utf-8") for i in ids])
        known = [(i, r) for i, r in ((i, state.doc(i)) for i in ids) if r is not None]
        if not known:
            return
        known_keys = [i.encode("utf-8") for i, _ in known]
        indexed = [i for i, r in known if r.indexed]
        state.prefetch("sigs", [i.encode("utf-8") for i in indexed])
        state.prefetch("meta", [SKIPPED_BANDS_PREFIX + i.encode("utf-8") for i in indexed])
        state.prefetch("exact", list({r.content_hash for _, r in known}))
        for namespace in ("parent", "clusters", "edges"):
            state.prefetch(namespace, known_keys)
        neighbours = {o.encode("utf-8") for i, _ in known for o, _, _ in state.edges(i)}
        neighbours.difference_update(known_keys)
        if neighbours:
            others = list(neighbours)
            for namespace in ("docs", "parent", "clusters", "edges"):
                state.prefetch(namespace, others)
        roots = {p for p in (state.get("parent", k) for k in [*known_keys, *neighbours]) if p is not None}
        if roots:
            for namespace in ("docs", "parent", "clusters"):
                state.prefetch(namespace, list(roots))
        raws = [(i, state.get("sigs", i.encode("utf-8"))) for i in indexed]
        present = [(doc_id, raw) for doc_id, raw in raws if raw is not None]
        if present:
            hashes = lsh.hashes(stack_rows([np.frombuffer(raw, dtype="<u4") for _, raw in present]))
            self._old_hashes = {doc_id: (raw, row) for (doc_id, raw), row in zip(present, hashes, strict=True)}

    def old_band_hashes(self, doc_id: str) -> np.ndarray | None:
        """The band hashes of ``doc_id``'s stored signature, if :meth:`prefetch_removals` computed them from it.

        None when it did not, or when the stored signature has changed since (a document twice
        in one batch): the caller computes them then.
        """
        memo = self._old_hashes.pop(doc_id, None)
        if memo is None or self.state.get("sigs", doc_id.encode("utf-8")) != memo[0]:
            return None
        return memo[1]

    def strip_boilerplate(
        self,
        docs: list[Document],
        computed: Sequence[TextLines] | None = None,
        known: list[DocRecord | None] | None = None,
        epochs: list[int] | None = None,
    ) -> tuple[list[str], list[bool]]:
        """Strip learned lines; count the lines of documents seen for the first time.

        Args:
            docs: The batch's documents.
            computed: Their lines when computed elsewhere (a signing process), else None.
            known: Per document, the record of an unchanged re-crawl recognized at the start of
                the batch: its lines are neither computed nor stripped, unless a line is learned
                before its turn, which then sets its entry to None (it is read in full). Updated.
            epochs: Per document, set here to the lines learned when its text is stripped. Updated.

        Returns:
            The texts to sign, and per document whether any line was stripped from it.

        """
        assert self.boilerplate is not None
        state, learner = self.state, self.boilerplate  # prepare() has prefetched the documents' records
        skip = known if known is not None else [None] * len(docs)
        forms: list[TextLines | None]
        if computed is not None:  # one per document: the loop below zips them strictly
            forms = list(computed)
            self.counters["lines_given"] += len(forms)
        else:
            reading = [d for d, k in zip(docs, skip, strict=True) if k is None]
            each = iter(learner.batch_lines([d.text for d in reading], [d.source for d in reading]))
            forms = [next(each) if k is None else None for k in skip]
        counted: set[str] = set()
        first_times = []
        for doc in docs:
            first_times.append(doc.doc_id not in counted and state.get("docs", doc.doc_id.encode("utf-8")) is None)
            counted.add(doc.doc_id)
        # only a document seen for the first time reads its lines' counts: a re-crawl is not
        # counted again (stripping reads the learned set, in memory)
        learner.prefetch_counts(
            [
                key
                for lines, first in zip(forms, first_times, strict=True)
                if first and lines is not None
                for key in lines.keys
                if key is not None
            ]
        )
        start = learner.stripped_lines
        pending = learner.pending  # carriers of lines learned in this batch, signed again at its end
        texts, stripped = [], []
        for k, (doc, lines, first_time) in enumerate(zip(docs, forms, first_times, strict=True)):
            epoch = learner.epoch(doc.source)
            if epochs is not None:
                # a first-time document's text is counted: its record is current at any epoch (recrawl.py)
                epochs[k] = COUNTED if first_time else epoch
            prior = skip[k]
            if prior is not None and epoch_current(prior.epoch, epoch) and doc.doc_id not in pending:
                texts.append(doc.text)  # recognized: not stripped, not signed (prepared from its record)
                stripped.append(False)
                continue
            if prior is not None:  # a line learned before its turn (or of its text): read in full after all
                skip[k] = None
            before = learner.stripped_lines
            texts.append(learner.strip_and_count(doc.text, doc.source, first_time, doc.doc_id, lines))
            stripped.append(learner.stripped_lines != before)
        self.counters["boilerplate_lines_stripped"] += learner.stripped_lines - start
        return texts, stripped


def _unchanged(state: StateView, item: Prepared) -> bool:
    """True if ``item`` is a known document whose stored version has the same identity key."""
    prior = state.doc(item.doc.doc_id)
    return prior is not None and prior.content_hash == item.content_hash
