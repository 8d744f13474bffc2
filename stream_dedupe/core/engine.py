"""The dedup engine: documents in, events out, state changes staged for one atomic commit.

The engine does no I/O of its own: it reads and writes through a
:class:`~stream_dedupe.storage.state.StateView`, and the caller (the embedded command or the
Kafka worker) decides when to publish the events and commit the state.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import numpy as np

from stream_dedupe.config import DedupeParams, RuntimeLimits
from stream_dedupe.core import events as ev
from stream_dedupe.core import warmstart
from stream_dedupe.core.batch import BatchPreparer, Prepared
from stream_dedupe.core.boilerplate import BoilerplateLearner, TextLines
from stream_dedupe.core.candidates import near_matches
from stream_dedupe.core.canonical import CanonicalKey
from stream_dedupe.core.compacted import canonical_updates
from stream_dedupe.core.cover import StateCoverGraph, later_neighbours, update_cover
from stream_dedupe.core.detach import detach
from stream_dedupe.core.fastpath import classify, decide_new
from stream_dedupe.core.hidden_pairs import HiddenPairs
from stream_dedupe.core.layout import resolve
from stream_dedupe.core.lshindex import LshIndex
from stream_dedupe.core.rebuild import rebuild_index
from stream_dedupe.core.records import Deletion, Document, Invalid, Record
from stream_dedupe.core.recrawl import current_recrawls, recrawled
from stream_dedupe.core.retention import still_expired
from stream_dedupe.core.retroactive import resign_carriers
from stream_dedupe.core.sharding.gather import ShardedStore
from stream_dedupe.core.signer import Signed, Signer
from stream_dedupe.core.unionfind import ClusterInfo, UnionFind
from stream_dedupe.errors import StateMismatchError
from stream_dedupe.storage.base import KVStore
from stream_dedupe.storage.state import SKIPPED_BANDS_KEPT, DocRecord, StateView

_PARAMS_KEY = b"params"
_SEQ_KEY = b"seq"


class DedupeEngine:
    """Decides, for each document, whether it is new or a near-duplicate, and keeps the clusters.

    Args:
        params: Index-shaping parameters; compared with those stored in the state.
        store: Where the state lives.
        limits: Runtime limits.
        warm: The arrays of :meth:`warm_arrays` saved from this very state (the caller checks
            that nothing was written since): the in-memory indexes are restored from them
            instead of rebuilt from the whole state. Arrays saved with other parameters are
            ignored (:mod:`~stream_dedupe.core.warmstart`).

    Raises:
        StateMismatchError: if the state was built with different parameters.

    """

    #: Decide the documents that can only be new singletons together (:mod:`~stream_dedupe.core.fastpath`);
    #: False sends every document through the per-document path (the tests compare the two).
    fast_path = True

    def __init__(
        self,
        params: DedupeParams,
        store: KVStore,
        limits: RuntimeLimits | None = None,
        warm: Mapping[str, np.ndarray] | None = None,
    ) -> None:
        self.params = resolve(params)
        self.limits = limits or RuntimeLimits()
        self.store = store
        self.state = StateView(store, self.limits.state_cache_entries)
        self.uf = UnionFind(self.state)
        self.signer = Signer(self.params)
        self.counters: Counter[str] = Counter()
        self.hidden = HiddenPairs(self.state, self.params, lambda: self.lsh, self.counters)
        self.cover = StateCoverGraph(self.state, self.params, self.hidden)
        self._check_params()
        sharded = isinstance(store, ShardedStore)  # its band tables live in the shards: nothing to restore
        restored = None if warm is None or sharded else warmstart.restore(warm, self.params, self.limits)
        self.warm_started = restored is not None
        self.boilerplate = (
            BoilerplateLearner(self.params.boilerplate, self.state, restored.boilerplate if restored else None)
            if self.params.boilerplate.learn
            else None
        )
        self.preparer = BatchPreparer(self.params, self.state, self.signer, self.boilerplate, self.counters)
        self.seq = int(self.state.get_json(_SEQ_KEY) or 0)
        self.lsh = (
            restored.lsh if restored else LshIndex(self.params.bands, self.params.rows, self.limits.max_bucket_size)
        )
        if restored is None:
            self.rebuild_index()

    def warm_arrays(self) -> dict[str, np.ndarray] | None:
        """The in-memory indexes as arrays for ``warm`` (None if not savable); right after a commit only."""
        sharded = isinstance(self.store, ShardedStore)
        return None if sharded else warmstart.engine_arrays(self.lsh, self.boilerplate, self.params, self.limits)

    def rebuild_index(self) -> None:
        """Rebuild the band tables from the stored signatures; on a sharded store, a window on the shards' tables."""
        if isinstance(self.store, ShardedStore):
            self.lsh = self.store.attach(self.params.bands, self.params.rows, self.limits.max_bucket_size)
            return
        self.lsh = LshIndex(self.params.bands, self.params.rows, self.limits.max_bucket_size)
        rebuild_index(self.store, self.lsh)

    def _check_params(self) -> None:
        wanted = self.params.to_state()
        stored = self.state.get_json(_PARAMS_KEY)
        if stored is None:
            self.state.put_json(_PARAMS_KEY, wanted)
            self.state.put("meta", SKIPPED_BANDS_KEPT, b"1")  # a new state: its rebuild can be exact
            self.state.commit()
            return
        from stream_dedupe.config import mismatch_message  # message building lives with the flag names

        message = mismatch_message(stored, wanted, self.params.lsh_margin)
        if message:
            raise StateMismatchError(message)

    # -- public API -------------------------------------------------------------------------
    def process(
        self,
        records: Sequence[Record],
        origins: Sequence[dict[str, Any] | None] | None = None,
        signed: Sequence[Signed | None] | None = None,
        lines: Sequence[TextLines | None] | None = None,
    ) -> list[ev.Event]:
        """Decide a batch of records; return their events in order, with ``seq`` numbers.

        Exactly one document event (``new``, ``duplicate-of``, ``unchanged`` or ``invalid``) is
        emitted per record, followed by any cluster events it caused. State changes are staged
        until :meth:`commit`.

        Args:
            records: Parsed input records.
            origins: Per record, where it came from (merged into ``invalid`` events).
            signed: Per record, its :class:`~stream_dedupe.core.signer.Signed` record when it was
                signed elsewhere with this engine's parameters (the worker's sign stage), else None.
                With learned boilerplate, used only for documents from which no learned line is stripped.
            lines: Per record, a document's boilerplate lines when computed elsewhere
                (:func:`~stream_dedupe.core.boilerplate.text_lines` with this engine's
                ``min_tokens``: ``dedupe --jobs``), else None; every document's, or none.

        """
        docs, presigned, given = [], [], []
        for i, record in enumerate(records):
            if isinstance(record, Document):
                docs.append(record)
                presigned.append(signed[i] if signed is not None else None)
                given.append(lines[i] if lines is not None else None)
        known = [t for t in given if t is not None]
        if known and len(known) != len(docs):
            raise ValueError("lines: give every document's lines, or none")
        removed = [r.doc_id for r in records if isinstance(r, Deletion)]
        prepared = self.preparer.prepare(docs, presigned, self.lsh, known if known else None, set(removed))
        fast = classify(records, prepared, self.state, self.lsh) if self.fast_path else [False] * len(prepared)
        self.preparer.prefetch_neighbours([p for p, f in zip(prepared, fast, strict=True) if not f], self.lsh, removed)
        # All of them at once, first: no record before a fast one reads what it writes (fastpath.py)
        news = iter(
            decide_new([p for p, f in zip(prepared, fast, strict=True) if f], self.state, self.lsh, self.counters)
        )
        out: list[ev.Event] = []
        k = 0
        for i, record in enumerate(records):
            if isinstance(record, Document):
                k += 1
                if fast[k - 1]:
                    out.append(next(news))
                    continue
            if isinstance(record, Invalid):
                self.counters["invalid"] += 1
                self.counters[f"invalid:{record.reason}"] += 1
                batch = [ev.invalid_event(record.doc_id, record.reason, record.detail, origins[i] if origins else None)]
            elif isinstance(record, Deletion):
                batch = self._delete(record.doc_id)
            else:
                batch = self._decide(prepared[k - 1], origins[i] if origins else None)
            out.extend(batch)
        if self.boilerplate is not None and self.boilerplate.pending:
            out.extend(
                resign_carriers(
                    self.boilerplate, self.state, self.preparer, self.signer, self.lsh, self.counters, self._decide
                )
            )
        for event in out:
            self.seq += 1
            event["seq"] = self.seq
        self.state.put_json(_SEQ_KEY, self.seq)
        return out

    def canonical_updates(self, events: Sequence[ev.Event]) -> list[tuple[str, bytes | None]]:
        """What the events change in the set of canonical documents, for a compacted topic.

        Call after :meth:`process` and before :meth:`commit`. Returns, in order and once per id,
        ``(id, original JSON)`` for each document that is now a canonical and ``(id, None)`` (a
        tombstone) for each one that no longer is (or was deleted).
        """
        return canonical_updates(self.state, events)

    def commit(self, meta: dict[bytes, bytes | None] | None = None) -> None:
        """Write the staged state changes (and ``meta`` entries) atomically."""
        self.state.commit(meta)

    def unchanged_recrawls(self, docs: Sequence[Document], removed: Collection[str] = ()) -> list[bool]:
        """Which of ``docs`` the committed state holds as they are: they need no signature (a hint).

        For a stage that signs ahead of :meth:`process` (the worker's sign stage), between batches;
        :meth:`process` checks each one again at its turn and signs what it does not recognize
        (:func:`~stream_dedupe.core.recrawl.current_recrawls`).
        """
        return current_recrawls(self.state, docs, removed, self.preparer.epoch)

    def still_expired(self, items: Sequence[tuple[str, int]]) -> list[bool]:
        """Per ``(doc_id, cutoff_us)``: the committed state holds the document, last updated before the cutoff.

        Between batches (the worker's retention, :mod:`stream_dedupe.worker.retention`): an
        expiry decided at its turn deletes only a document that is still that old.
        """
        return [still_expired(self.state.doc(doc_id), cutoff) for doc_id, cutoff in items]

    def cluster_of(self, doc_id: str) -> ClusterInfo | None:
        """The cluster of a known document, or None."""
        if self.state.doc(doc_id) is None:
            return None
        return self.uf.cluster_of(doc_id)

    def normalize(self, text: str) -> str:
        """The engine's normalized form of a text."""
        return self.signer.normalizer.normalize(text)

    # -- steps ------------------------------------------------------------------------------
    def _decide(self, item: Prepared, origin: dict[str, Any] | None = None) -> list[ev.Event]:
        doc = item.doc
        state = self.state
        prior = state.doc(doc.doc_id)
        if item.tokens == 0:
            return self._empty(doc.doc_id, prior, origin)
        self.counters["documents"] += 1
        if prior is not None and prior.content_hash == item.content_hash:
            self.counters["unchanged"] += 1
            record = recrawled(prior, item.fingerprint, item.epoch, doc.updated_at_us)
            if record is not prior:
                state.put_doc(doc.doc_id, record)
            return [
                ev.document_event(
                    "unchanged", doc.doc_id, self.uf.cluster_of(doc.doc_id), representative=prior.covered_by
                )
            ]
        events: list[ev.Event] = []
        seeds: list[str] = []
        if prior is not None:
            self.counters["replaced"] += 1
            if prior.representative:
                seeds = later_neighbours(self.cover, doc.doc_id)
            old_hashes = self.preparer.old_band_hashes(doc.doc_id)
            events.extend(detach(state, self.uf, self.lsh, doc.doc_id, prior, old_hashes))
        head = state.exact_group_head(item.content_hash)
        state.add_to_exact_group(item.content_hash, doc.doc_id)
        state.put_document_json(doc.doc_id, doc.raw)
        indexed = False
        matches: list[tuple[str, float, bool]] = []
        if head is not None:
            matches.append((head, 1.0, True))
        elif item.signature is not None:
            matches = near_matches(item, state, self.lsh, self.params, self.counters, self.hidden)
            indexed = True
        state.put_doc(
            doc.doc_id,
            DocRecord(
                item.content_hash,
                item.length,
                doc.updated_at_us,
                item.tokens,
                indexed,
                doc.source,
                title_key=item.title_key,
                fingerprint=item.fingerprint,
                epoch=item.epoch,
            ),
        )
        if item.signature is not None:
            state.put_signature(doc.doc_id, item.signature)
            if item.shingle_set is not None:
                state.put_shingle_set(doc.doc_id, item.shingle_set)
        if not matches:
            # No verified pair and no parent (a replaced document was detached): a singleton.
            self.counters["new"] += 1
            alone = ClusterInfo(1, doc.doc_id, CanonicalKey(doc.doc_id, item.length, doc.updated_at_us))
            cover = ev.cover_events(doc.doc_id, update_cover(self.cover, seeds), self.counters) if seeds else []
            first = ev.document_event("new", doc.doc_id, alone)
            first["updated"] = prior is not None
            return [first, *events, *cover]
        if prior is None:
            # A document never seen before has no union-find records and no edges yet.
            key = doc.doc_id.encode("utf-8")
            for namespace in ("parent", "clusters", "edges"):
                state.mark_absent(namespace, key)
        cluster_events, cluster = self._join(doc.doc_id, matches)
        cover = ev.cover_events(doc.doc_id, update_cover(self.cover, seeds, arrived=[doc.doc_id]), self.counters)
        first = self._document_event(doc.doc_id, item, cluster)  # the cover changes no cluster
        first["updated"] = prior is not None
        return [first, *cluster_events, *events, *cover]

    def _empty(self, doc_id: str, prior: DocRecord | None, origin: dict[str, Any] | None) -> list[ev.Event]:
        """A text with no words: never deduplicated (empty pages would all be one cluster).

        It is an ``invalid`` outcome (``empty-text``); a known document whose text became empty
        leaves the index as if deleted (what it said before is no longer there).
        """
        self.counters["invalid"] += 1
        self.counters["invalid:empty-text"] += 1
        detail = "the text has no words after normalization (empty, whitespace or punctuation only): nothing to index"
        if prior is not None:
            detail += "; the earlier version of this document was removed"
        invalid = ev.invalid_event(doc_id, "empty-text", detail, origin)
        return [invalid, *self._remove(doc_id, prior)] if prior is not None else [invalid]

    def _remove(self, doc_id: str, prior: DocRecord) -> list[ev.Event]:
        """Take a known document out of the state; the cluster and cover events that follow."""
        seeds = later_neighbours(self.cover, doc_id) if prior.representative else []
        events = detach(self.state, self.uf, self.lsh, doc_id, prior, self.preparer.old_band_hashes(doc_id))
        return [*events, *ev.cover_events(doc_id, update_cover(self.cover, seeds), self.counters)]

    def _document_event(self, doc_id: str, item: Prepared, cluster: ClusterInfo) -> ev.Event:
        """``duplicate-of`` when a representative covers the document, else ``new`` (``cluster``: its cluster)."""
        record = self.state.doc(doc_id)
        assert record is not None
        if record.covered_by is None:
            self.counters["new"] += 1
            self.counters["new_in_cluster"] += 1
            return ev.document_event("new", doc_id, cluster)
        rep = self.state.doc(record.covered_by)
        assert rep is not None
        exact = rep.content_hash == item.content_hash
        self.counters["duplicates"] += 1
        if exact:
            self.counters["exact_duplicates"] += 1
        return ev.document_event(
            "duplicate-of",
            doc_id,
            cluster,
            record.covered_by,
            record.covered_similarity,
            exact,
            representative=record.covered_by,
            threshold=self.params.pair_threshold(record.source, rep.source),
        )

    def _delete(self, doc_id: str) -> list[ev.Event]:
        self.counters["deleted"] += 1
        prior = self.state.doc(doc_id)
        if prior is None:
            return [ev.deleted_event(doc_id, known=False)]
        return [ev.deleted_event(doc_id, known=True), *self._remove(doc_id, prior)]

    def _join(self, doc_id: str, matches: list[tuple[str, float, bool]]) -> tuple[list[ev.Event], ClusterInfo]:
        """Union ``doc_id`` with its matches and store the edges; the cluster events, and its cluster now."""
        state, uf = self.state, self.uf
        before: dict[str, ClusterInfo] = {}
        for root in uf.roots_of(other for other, _, _ in matches):  # N near copies of a cluster: one root
            before[root] = uf.info(root)
        state.put_edges(doc_id, list(matches))  # a new or just-detached document has no edges yet
        state.add_edge_to_each(doc_id, matches)
        # One union per cluster joined, not per match (a cluster of N near copies: N). The records
        # read above stay current (each union only grows the document's own cluster); the document
        # is found before each union and after the last, compressing its path as union() and
        # cluster_of() always did.
        own = uf.find(doc_id)
        final = uf.info(own)
        for root, info in before.items():
            final = uf.union_roots(own, final, root, info).after
            own = uf.find(doc_id)
        events: list[ev.Event] = []
        for info in before.values():
            if info.canonical.doc_id != final.canonical.doc_id:
                self.counters["canonical_changes"] += 1
                events.append(ev.canonical_changed(final, info.canonical.doc_id, doc_id))
        if len(before) > 1:
            self.counters["merges"] += 1
            events.append(ev.clusters_merged(final, list(before.values()), doc_id))
        return events, final


def stored_seq(store: KVStore) -> int:
    """The ``seq`` of the last event a state's engine emitted (0 for a new state)."""
    return int(StateView(store).get_json(_SEQ_KEY) or 0)


def stored_params(store: KVStore) -> DedupeParams | None:
    """The parameters a state was built with, or None for a new state."""
    stored = StateView(store).get_json(_PARAMS_KEY)
    return None if stored is None else DedupeParams.from_state(stored)
