"""The dedup engine: documents in, events out, state changes staged for one atomic commit.

The engine does no I/O of its own: it reads and writes through a
:class:`~stream_dedupe.storage.state.StateView`, and the caller (the embedded command or the
Kafka worker) decides when to publish the events and commit the state.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from stream_dedupe.config import DedupeParams, RuntimeLimits
from stream_dedupe.core import events as ev
from stream_dedupe.core.bandindex import LshIndex
from stream_dedupe.core.boilerplate import BoilerplateLearner
from stream_dedupe.core.canonical import CanonicalKey
from stream_dedupe.core.detach import detach
from stream_dedupe.core.records import Deletion, Document, Invalid, Record
from stream_dedupe.core.signer import Signed, Signer
from stream_dedupe.core.unionfind import ClusterInfo, UnionFind
from stream_dedupe.core.verify import estimated_jaccard, exact_jaccard
from stream_dedupe.errors import StateMismatchError
from stream_dedupe.storage.base import KVStore
from stream_dedupe.storage.state import DocRecord, StateView

_PARAMS_KEY = b"params"
_SEQ_KEY = b"seq"


@dataclass
class _Prepared:
    doc: Document
    content_hash: bytes
    length: int
    tokens: int
    signature: np.ndarray | None = None
    band_hashes: np.ndarray | None = None
    shingle_set: np.ndarray | None = None


class DedupeEngine:
    """Decides, for each document, whether it is new or a near-duplicate, and keeps the clusters.

    Args:
        params: Index-shaping parameters; compared with those stored in the state.
        store: Where the state lives.
        limits: Runtime limits.

    Raises:
        StateMismatchError: if the state was built with different parameters.

    """

    def __init__(self, params: DedupeParams, store: KVStore, limits: RuntimeLimits | None = None) -> None:
        self.params = params.resolved()
        self.limits = limits or RuntimeLimits()
        self.store = store
        self.state = StateView(store)
        self.uf = UnionFind(self.state)
        self.signer = Signer(self.params)
        self.counters: Counter[str] = Counter()
        self._check_params()
        self.boilerplate = (
            BoilerplateLearner(self.params.boilerplate, self.state) if self.params.boilerplate.learn else None
        )
        self.seq = int(self.state.get_json(_SEQ_KEY) or 0)
        bands, rows = self.params.band_layout
        self.lsh = LshIndex(bands, rows, self.limits.max_bucket_size)
        self.rebuild_index()

    def rebuild_index(self) -> None:
        """Rebuild the in-memory band tables from the signatures in the state (start-up, recovery)."""
        bands, rows = self.params.band_layout
        self.lsh = LshIndex(bands, rows, self.limits.max_bucket_size)
        chunk: list[tuple[bytes, bytes]] = []
        for item in self.store.items("sigs"):
            chunk.append(item)
            if len(chunk) == 4096:
                self._index_chunk(chunk)
                chunk = []
        self._index_chunk(chunk)

    def _index_chunk(self, chunk: list[tuple[bytes, bytes]]) -> None:
        if not chunk:
            return
        records = self.store.get_many("docs", [k for k, _ in chunk])
        indexed = [(k, v) for (k, v), r in zip(chunk, records, strict=True) if r and DocRecord.decode(r).indexed]
        if not indexed:
            return
        sigs = np.frombuffer(b"".join(v for _, v in indexed), dtype="<u4").reshape(len(indexed), -1)
        hashes = self.lsh.hashes(sigs)
        for (key, _), row in zip(indexed, hashes, strict=True):
            self.lsh.add(key.decode("utf-8"), row)

    def _check_params(self) -> None:
        wanted = self.params.to_state()
        stored = self.state.get_json(_PARAMS_KEY)
        if stored is None:
            self.state.put_json(_PARAMS_KEY, wanted)
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
                Ignored when the parameters learn boilerplate (signing then depends on the state).

        """
        docs, presigned = [], []
        for i, record in enumerate(records):
            if isinstance(record, Document):
                docs.append(record)
                presigned.append(signed[i] if signed is not None and self.signer.stateless else None)
        prepared = self._prepare(docs, presigned)
        out: list[ev.Event] = []
        it = iter(prepared)
        for i, record in enumerate(records):
            if isinstance(record, Invalid):
                self.counters["invalid"] += 1
                self.counters[f"invalid:{record.reason}"] += 1
                batch = [ev.invalid_event(record.doc_id, record.reason, record.detail, origins[i] if origins else None)]
            elif isinstance(record, Deletion):
                batch = self._delete(record.doc_id)
            else:
                batch = self._decide(next(it))
            for event in batch:
                self.seq += 1
                event["seq"] = self.seq
            out.extend(batch)
        self.state.put_json(_SEQ_KEY, self.seq)
        return out

    def canonical_updates(self, events: Sequence[ev.Event]) -> list[tuple[str, bytes | None]]:
        """What the events change in the set of canonical documents, for a compacted topic.

        Call after :meth:`process` and before :meth:`commit`. Returns, in order and once per id,
        ``(id, original JSON)`` for each document that is now a canonical and ``(id, None)`` (a
        tombstone) for each one that no longer is (or was deleted).
        """
        touched: dict[str, None] = {}
        for event in events:
            kind = event["event"]
            if kind in ("new", "duplicate-of", "deleted"):
                # duplicate-of: a tombstone too when the id was a canonical before (a re-crawl)
                touched.pop(event["id"], None)
                touched[event["id"]] = None
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
            canonical = self.state.doc(doc_id) is not None and self.uf.cluster_of(doc_id).canonical.doc_id == doc_id
            updates.append((doc_id, self.state.document_json(doc_id) if canonical else None))
        return updates

    def commit(self, meta: dict[bytes, bytes | None] | None = None) -> None:
        """Write the staged state changes (and ``meta`` entries) atomically."""
        self.state.commit(meta)

    def cluster_of(self, doc_id: str) -> ClusterInfo | None:
        """The cluster of a known document, or None."""
        if self.state.doc(doc_id) is None:
            return None
        return self.uf.cluster_of(doc_id)

    def normalize(self, text: str) -> str:
        """The engine's normalized form of a text."""
        return self.signer.normalizer.normalize(text)

    # -- steps ------------------------------------------------------------------------------
    def _prepare(self, docs: list[Document], presigned: list[Signed | None]) -> list[_Prepared]:
        todo = [i for i, s in enumerate(presigned) if s is None]
        signed = list(presigned)
        if todo:
            texts = [docs[i].text for i in todo]
            if self.boilerplate is not None:
                texts = self._strip_boilerplate([docs[i] for i in todo])
            for i, fresh in zip(todo, self.signer.sign(texts), strict=True):
                signed[i] = fresh
        self.counters["presigned"] += len(docs) - len(todo)
        prepared = []
        for doc, record in zip(docs, signed, strict=True):
            assert record is not None
            prepared.append(_Prepared(doc, record.content_hash, record.length, record.tokens, record.signature))
            prepared[-1].shingle_set = record.shingle_set
        with_sig = [p for p in prepared if p.signature is not None]
        if with_sig:
            band_hashes = self.lsh.hashes(np.stack([p.signature for p in with_sig if p.signature is not None]))
            for entry, row in zip(with_sig, band_hashes, strict=True):
                entry.band_hashes = row
        self.state.prefetch("exact", [p.content_hash for p in prepared])
        self._prefetch_neighbours(prepared)
        return prepared

    def _prefetch_neighbours(self, prepared: list[_Prepared]) -> None:
        """Load, with one multi-get per namespace, what deciding the batch will read.

        The documents already in the state that a batch document can match are its exact-content
        group and its LSH candidates; reading their records one by one was most of the engine's
        time on duplicate-heavy input.
        """
        state = self.state
        state.prefetch("docs", [p.doc.doc_id.encode("utf-8") for p in prepared])
        # Documents seen before (re-crawls) are read back too: their old version may be detached.
        ids = {p.doc.doc_id for p in prepared if state.get("docs", p.doc.doc_id.encode("utf-8")) is not None}
        signed = []
        for item in prepared:
            group = state.exact_group(item.content_hash)
            if group:
                ids.add(group[0])
            elif item.band_hashes is not None:
                signed.append(item.band_hashes)
        if signed:
            ids |= self.lsh.query_many(np.stack(signed))
        keys = [i.encode("utf-8") for i in ids]
        for namespace in ("docs", "parent", "clusters", "edges", "sets" if self.params.verify == "exact" else "sigs"):
            state.prefetch(namespace, keys)
        # Union-find roots of those documents (one level; paths are compressed as they are used).
        roots = {p for p in (state.get("parent", k) for k in keys) if p is not None}
        if roots:
            for namespace in ("docs", "parent", "clusters"):
                state.prefetch(namespace, list(roots))

    def _strip_boilerplate(self, docs: list[Document]) -> list[str]:
        """Strip learned lines; count the lines of documents seen for the first time."""
        assert self.boilerplate is not None
        state, learner = self.state, self.boilerplate
        state.prefetch("docs", [d.doc_id.encode("utf-8") for d in docs])
        counted: set[str] = set()
        before = learner.stripped_lines
        texts = []
        for doc in docs:
            first_time = doc.doc_id not in counted and state.get("docs", doc.doc_id.encode("utf-8")) is None
            counted.add(doc.doc_id)
            texts.append(learner.strip_and_count(doc.text, doc.source, count=first_time))
        self.counters["boilerplate_lines_stripped"] += learner.stripped_lines - before
        return texts

    def _decide(self, item: _Prepared) -> list[ev.Event]:
        doc = item.doc
        state = self.state
        self.counters["documents"] += 1
        prior = state.doc(doc.doc_id)
        if prior is not None and prior.content_hash == item.content_hash:
            self.counters["unchanged"] += 1
            return [ev.document_event("unchanged", doc.doc_id, self.uf.cluster_of(doc.doc_id))]
        events: list[ev.Event] = []
        if prior is not None:
            self.counters["replaced"] += 1
            events.extend(detach(state, self.uf, self.lsh, doc.doc_id, prior))
        group = state.exact_group(item.content_hash)
        state.put_exact_group(item.content_hash, [*group, doc.doc_id])
        state.put_document_json(doc.doc_id, doc.raw)
        indexed = False
        matches: list[tuple[str, float, bool]] = []
        if group:
            matches.append((group[0], 1.0, True))
        elif item.signature is not None:
            matches = self._near_matches(item)
            indexed = True
        state.put_doc(
            doc.doc_id,
            DocRecord(item.content_hash, item.length, doc.updated_at_us, item.tokens, indexed, doc.source),
        )
        if item.signature is not None:
            state.put_signature(doc.doc_id, item.signature)
            if item.shingle_set is not None:
                state.put_shingle_set(doc.doc_id, item.shingle_set)
        if not matches:
            # No verified pair and no parent (a replaced document was detached): a singleton.
            self.counters["new"] += 1
            alone = ClusterInfo(1, doc.doc_id, CanonicalKey(doc.doc_id, item.length, doc.updated_at_us))
            events.insert(0, ev.document_event("new", doc.doc_id, alone))
            return events
        if prior is None:
            # A document never seen before has no union-find records and no edges yet.
            key = doc.doc_id.encode("utf-8")
            for namespace in ("parent", "clusters", "edges"):
                state.mark_absent(namespace, key)
        return [*self._join(doc.doc_id, matches), *events]

    def _delete(self, doc_id: str) -> list[ev.Event]:
        self.counters["deleted"] += 1
        prior = self.state.doc(doc_id)
        if prior is None:
            return [ev.deleted_event(doc_id, known=False)]
        return [ev.deleted_event(doc_id, known=True), *detach(self.state, self.uf, self.lsh, doc_id, prior)]

    def _near_matches(self, item: _Prepared) -> list[tuple[str, float, bool]]:
        doc_id = item.doc.doc_id
        assert item.band_hashes is not None and item.signature is not None
        candidates, full = self.lsh.add(doc_id, item.band_hashes)
        self.counters["hot_bucket_skips"] += full
        candidates.discard(doc_id)
        self.counters["candidates"] += len(candidates)
        matches = []
        for other in sorted(candidates):
            similarity = self._similarity(item, other)
            if similarity >= self.params.decision_threshold:
                matches.append((other, similarity, False))
            else:
                self.counters["rejected_candidates"] += 1
        return matches

    def _similarity(self, item: _Prepared, other: str) -> float:
        if item.shingle_set is not None:
            other_set = self.state.shingle_set(other)
            assert other_set is not None, f"exact mode: no shingle set stored for {other!r}"
            return exact_jaccard(item.shingle_set, other_set)
        other_sig = self.state.signature(other)
        assert other_sig is not None and item.signature is not None
        return estimated_jaccard(item.signature, other_sig)

    def _join(self, doc_id: str, matches: list[tuple[str, float, bool]]) -> list[ev.Event]:
        state, uf = self.state, self.uf
        before: dict[str, ClusterInfo] = {}
        for other, _, _ in matches:
            root = uf.find(other)
            before.setdefault(root, uf.info(root))
        state.put_edges(doc_id, list(matches))  # a new or just-detached document has no edges yet
        for other, similarity, exact in matches:
            state.put_edges(other, [*state.edges(other), (doc_id, similarity, exact)])
            uf.union(doc_id, other)
        final = uf.cluster_of(doc_id)
        best, similarity, exact = min(matches, key=lambda m: (-m[1], m[0]))
        self.counters["duplicates"] += 1
        if exact:
            self.counters["exact_duplicates"] += 1
        events = [ev.document_event("duplicate-of", doc_id, final, best, similarity, exact)]
        for info in before.values():
            if info.canonical.doc_id != final.canonical.doc_id:
                self.counters["canonical_changes"] += 1
                events.append(ev.canonical_changed(final, info.canonical.doc_id, doc_id))
        if len(before) > 1:
            self.counters["merges"] += 1
            events.append(ev.clusters_merged(final, list(before.values()), doc_id))
        return events


def stored_params(store: KVStore) -> DedupeParams | None:
    """The parameters a state was built with, or None for a new state."""
    stored = StateView(store).get_json(_PARAMS_KEY)
    return None if stored is None else DedupeParams.from_state(stored)
