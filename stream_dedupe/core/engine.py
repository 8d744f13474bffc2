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

import mmh3
import numpy as np

from stream_dedupe.config import DedupeParams, RuntimeLimits
from stream_dedupe.core import events as ev
from stream_dedupe.core.canonical import CanonicalKey
from stream_dedupe.core.detach import detach
from stream_dedupe.core.kernels import text_stats
from stream_dedupe.core.lsh import band_keys
from stream_dedupe.core.minhash import MinHasher
from stream_dedupe.core.normalize import Normalizer
from stream_dedupe.core.records import Document, Invalid
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
    keys: list[bytes] | None = None
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
        self.normalizer = Normalizer(self.params.normalization)
        self.hasher = MinHasher(self.params.num_perm, self.params.seed, self.params.shingle)
        self.counters: Counter[str] = Counter()
        self._check_params()
        self.seq = int(self.state.get_json(_SEQ_KEY) or 0)

    def _check_params(self) -> None:
        wanted = self.params.to_state()
        stored = self.state.get_json(_PARAMS_KEY)
        if stored is None:
            self.state.put_json(_PARAMS_KEY, wanted)
            self.state.commit()
            return
        diffs = [
            f"{k}: state has {stored.get(k)!r}, this run asks for {v!r}"
            for k, v in wanted.items()
            if stored.get(k) != v
        ]
        if diffs:
            raise StateMismatchError(
                "the state was built with different parameters (" + "; ".join(diffs) + "). "
                "Re-run with the state's values, or point --state at a new directory to build a new index "
                "with these parameters."
            )

    # -- public API -------------------------------------------------------------------------
    def process(
        self, records: Sequence[Document | Invalid], origins: Sequence[dict[str, Any] | None] | None = None
    ) -> list[ev.Event]:
        """Decide a batch of records; return their events in order, with ``seq`` numbers.

        Exactly one document event (``new``, ``duplicate-of``, ``unchanged`` or ``invalid``) is
        emitted per record, followed by any cluster events it caused. State changes are staged
        until :meth:`commit`.

        Args:
            records: Parsed input records.
            origins: Per record, where it came from (merged into ``invalid`` events).

        """
        prepared = self._prepare([r for r in records if isinstance(r, Document)])
        out: list[ev.Event] = []
        it = iter(prepared)
        for i, record in enumerate(records):
            if isinstance(record, Invalid):
                self.counters["invalid"] += 1
                self.counters[f"invalid:{record.reason}"] += 1
                batch = [
                    ev.invalid_event(
                        record.doc_id, record.reason, record.detail, origins[i] if origins else None
                    )
                ]
            else:
                batch = self._decide(next(it))
            for event in batch:
                self.seq += 1
                event["seq"] = self.seq
            out.extend(batch)
        self.state.put_json(_SEQ_KEY, self.seq)
        return out

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
        return self.normalizer.normalize(text)

    # -- steps ------------------------------------------------------------------------------
    def _prepare(self, docs: list[Document]) -> list[_Prepared]:
        buf, offsets = self.normalizer.normalize_batch([d.text for d in docs])
        data = buf.tobytes()
        chars, tokens = text_stats(buf, offsets)
        bounds = offsets.tolist()
        prepared = [
            _Prepared(doc, mmh3.hash_bytes(data[bounds[i] : bounds[i + 1]]), int(chars[i]), int(tokens[i]))
            for i, doc in enumerate(docs)
        ]
        if docs:
            self._sign(prepared, buf, offsets)
        self.state.prefetch("docs", [p.doc.doc_id.encode("utf-8") for p in prepared])
        self.state.prefetch("exact", [p.content_hash for p in prepared])
        return prepared

    def _sign(self, prepared: list[_Prepared], buf: np.ndarray, offsets: np.ndarray) -> None:
        """MinHash and band keys for every document long enough for near-duplicate matching."""
        hashes, bounds = self.hasher.shingle_hashes_packed(buf, offsets)
        signatures = self.hasher.signatures_from_hashes(hashes, bounds)
        bands, rows = self.params.band_layout
        keys = band_keys(signatures, bands, rows)
        min_tokens = max(self.params.min_tokens, 1)
        for row, item in enumerate(prepared):
            if item.tokens < min_tokens:
                continue
            item.signature = signatures[row]
            item.keys = keys[row]
            if self.params.verify == "exact":
                item.shingle_set = np.unique(hashes[bounds[row] : bounds[row + 1]])
        self.state.prefetch("bands", [k for item in prepared for k in item.keys or ()])

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
            events.extend(detach(state, self.uf, self.params, doc.doc_id, prior))
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
            doc.doc_id, DocRecord(item.content_hash, item.length, doc.updated_at_us, item.tokens, indexed)
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
        return [*self._join(doc.doc_id, matches), *events]

    def _near_matches(self, item: _Prepared) -> list[tuple[str, float, bool]]:
        state = self.state
        doc_id = item.doc.doc_id
        assert item.keys is not None and item.signature is not None
        candidates, full = state.add_to_buckets(item.keys, doc_id, self.limits.max_bucket_size)
        self.counters["hot_bucket_skips"] += full
        candidates.discard(doc_id)
        self.counters["candidates"] += len(candidates)
        matches = []
        for other in sorted(candidates):
            similarity = self._similarity(item, other)
            if similarity >= self.params.threshold:
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
        state.put_edges(doc_id, [*state.edges(doc_id), *matches])
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
