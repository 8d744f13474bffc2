"""Typed access to the engine's state over any :class:`~stream_dedupe.storage.base.KVStore`.

Document records, signatures, shingle sets, content groups, verified pairs and the union-find's
parents and clusters, read and written through one batch's overlay
(:class:`~stream_dedupe.storage.overlay.BatchOverlay`): :meth:`StateView.commit` applies a batch
as one atomic write. This module imports no storage engine; it works the same over the
in-memory and the RocksDB adapters.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import orjson

from stream_dedupe.model import CanonicalKey, ClusterInfo
from stream_dedupe.storage.base import KVStore
from stream_dedupe.storage.docrecord import DocRecord, dumps
from stream_dedupe.storage.groups import GroupRepresentatives
from stream_dedupe.storage.hot import MISS
from stream_dedupe.storage.overlay import DEFAULT_CACHE_ENTRIES, HOT_NAMESPACES, RECORDS, BatchOverlay

__all__ = ["DEFAULT_CACHE_ENTRIES", "HOT_NAMESPACES", "DocRecord", "Edge", "StateView", "dumps"]

_U32 = np.dtype("<u4")
#: Meta key prefix of a document's skipped bands (packed bits, 1 = found its bucket full, not joined).
SKIPPED_BANDS_PREFIX = b"skipped-bands/"
#: Meta key set in a state whose documents record their skipped bands (its rebuild is exact).
SKIPPED_BANDS_KEPT = b"skipped-bands-kept"

Edge = tuple[str, float, bool]


def _le_bytes(values: np.ndarray) -> bytes:
    """Little-endian uint32 bytes (no copy-convert on little-endian hosts)."""
    if values.dtype == _U32:
        return values.tobytes()
    return values.astype(_U32).tobytes()


def skipped_bands_of(store: KVStore, bands: int) -> dict[bytes, np.ndarray]:
    """Every document's skipped bands kept in ``store`` (key -> uint8 per band, 1 = not joined)."""
    start = len(SKIPPED_BANDS_PREFIX)
    return {
        key[start:]: np.unpackbits(np.frombuffer(value, dtype=np.uint8))[:bands]
        for key, value in store.items("meta")
        if key.startswith(SKIPPED_BANDS_PREFIX)
    }


def _key(doc_id: str) -> bytes:
    return doc_id.encode("utf-8")


def _decode_edges(raw: bytes) -> list[Edge]:
    return [(o, s, e) for o, s, e in orjson.loads(raw)]


def _decode_cluster(raw: bytes) -> ClusterInfo:
    size, label, (cid, length, updated) = orjson.loads(raw)
    return ClusterInfo(size, label, CanonicalKey(cid, length, updated))


def decode_cluster(raw: bytes) -> ClusterInfo:
    """A stored ``clusters`` value (for scans of the namespace that bypass a :class:`StateView`)."""
    return _decode_cluster(raw)


class StateView(BatchOverlay):
    """Batch-scoped, typed view of the state; also the union-find's :class:`ClusterStore`.

    Reads go through the batch's overlay, then the :class:`~stream_dedupe.storage.hot.HotCache`
    of committed values, then the store; writes stay in the overlay until :meth:`commit`
    (:class:`~stream_dedupe.storage.overlay.BatchOverlay`).

    Args:
        store: The key-value store underneath.
        cache_entries: Bound of the cache of committed values kept between batches (0: none).

    """

    def __init__(self, store: KVStore, cache_entries: int = DEFAULT_CACHE_ENTRIES) -> None:
        super().__init__(store, cache_entries)
        #: The verified pairs of a document that are not exact-content ones, by key (this batch).
        self._near: dict[bytes, list[Edge]] = {}
        #: The representatives of large content groups, kept between batches (see :meth:`group_representatives`).
        self.groups = GroupRepresentatives()

    def _records_rewritten(self) -> None:
        self.groups.clear()  # which members of a group are representatives is not known any more

    def _list_rewritten(self, namespace: str, key: bytes) -> None:
        if namespace == "edges":
            self._near.pop(key, None)

    def _batch_dropped(self) -> None:
        self._near.clear()

    # -- documents --------------------------------------------------------------------------
    def doc(self, doc_id: str) -> DocRecord | None:
        """The record of a document, or None if unknown."""
        try:
            return self._records[doc_id]
        except KeyError:
            pass
        key = _key(doc_id)
        if self.hot.limit and key not in self._writes["docs"]:
            held = self.hot.lookup(RECORDS, doc_id)
            if held is not MISS:
                self._records[doc_id] = held
                return held  # type: ignore[no-any-return]
        raw = self.get("docs", key)
        record = None if raw is None else DocRecord.decode(raw)
        self._records[doc_id] = record
        return record

    def committed_docs(self, doc_ids: Sequence[str]) -> list[DocRecord | None]:
        """The records of ``doc_ids`` as last committed, read outside any batch.

        The batch's overlay is neither read nor filled, and nothing is cached: for a hint taken
        between batches (the worker's sign stage), which the batch checks again at its turn.
        """
        keys = [_key(doc_id) for doc_id in doc_ids]
        held = self.hot.take("docs", set(keys)) if self.hot.limit else {}
        missing = [k for k in keys if k not in held]
        if missing:
            held.update(zip(missing, self.store.get_many("docs", missing), strict=True))
        decode = DocRecord.decode
        return [None if (raw := held[k]) is None else decode(raw) for k in keys]

    def prefetch_docs(self, doc_ids: Iterable[str]) -> None:
        """:meth:`prefetch` of the records of ``doc_ids`` that this batch has not read or written yet."""
        records = self._records
        missing = [doc_id.encode("utf-8") for doc_id in doc_ids if doc_id not in records]
        if missing:
            self.prefetch("docs", missing)

    def put_doc(self, doc_id: str, record: DocRecord | None) -> None:
        """Write (or delete) a document record."""
        key, raw = _key(doc_id), None if record is None else record.encode()
        self._cache["docs"][key] = raw
        self._writes["docs"][key] = raw
        self._records[doc_id] = record
        if record is not None and record.covered_by is None:
            self.groups.joined(record.content_hash, doc_id)

    def document_json(self, doc_id: str) -> bytes | None:
        """The original JSON of a document."""
        return self.get("documents", _key(doc_id))

    def put_document_json(self, doc_id: str, raw: bytes | None) -> None:
        """Store (or delete) the original JSON of a document."""
        self.put("documents", _key(doc_id), raw)

    def signature(self, doc_id: str) -> np.ndarray | None:
        """The MinHash signature of a document, or None."""
        raw = self.get("sigs", _key(doc_id))
        return None if raw is None else np.frombuffer(raw, dtype=_U32)

    def put_signature(self, doc_id: str, signature: np.ndarray | None) -> None:
        """Store (or delete) a signature, little-endian."""
        self.put("sigs", _key(doc_id), None if signature is None else _le_bytes(signature))

    def shingle_set(self, doc_id: str) -> np.ndarray | None:
        """The sorted unique shingle hashes of a document (exact mode), or None."""
        raw = self.get("sets", _key(doc_id))
        return None if raw is None else np.frombuffer(raw, dtype=_U32)

    def shingle_set_bytes(self, doc_ids: Sequence[str]) -> list[bytes | None]:
        """The stored shingle sets of ``doc_ids`` as bytes (little-endian uint32), None where there is none."""
        get = self.get
        return [get("sets", _key(doc_id)) for doc_id in doc_ids]

    def signature_bytes(self, doc_ids: Sequence[str]) -> list[bytes | None]:
        """The stored signatures of ``doc_ids`` as bytes (little-endian uint32), None where there is none."""
        get = self.get
        return [get("sigs", _key(doc_id)) for doc_id in doc_ids]

    def put_skipped_bands(self, doc_id: str, skipped: np.ndarray | None) -> None:
        """Store the bands a document found full and did not join (uint8 per band); None or none: delete.

        A delete reads first: most documents never skip a band, and a delete is a changelog record.
        """
        key = SKIPPED_BANDS_PREFIX + _key(doc_id)
        if skipped is not None and skipped.any():
            self.put("meta", key, np.packbits(skipped != 0).tobytes())
        elif self.get("meta", key) is not None:
            self.put("meta", key, None)

    def put_shingle_set(self, doc_id: str, hashes: np.ndarray | None) -> None:
        """Store (or delete) a shingle set, little-endian."""
        self.put("sets", _key(doc_id), None if hashes is None else _le_bytes(hashes))

    def put_new_documents(
        self,
        doc_ids: Sequence[str],
        raws: Sequence[bytes],
        records: Sequence[bytes],
        signatures: np.ndarray,
        shingle_sets: Sequence[np.ndarray | None],
    ) -> None:
        """Stage documents never seen before, one overlay write per namespace (the batch fast path).

        Each is the only member of a new content group: stage the groups with
        :meth:`put_new_exact_groups`.

        Args:
            doc_ids: The documents.
            raws: Their original JSON.
            records: Their encoded records (:meth:`DocRecord.encode_representative`).
            signatures: One signature a row.
            shingle_sets: Their shingle sets (None: estimate mode, none stored).

        """
        keys = [_key(doc_id) for doc_id in doc_ids]
        self.put_many("documents", keys, raws)
        self._cache["docs"].update(zip(keys, records, strict=True))  # as put_doc (representatives of new groups)
        self._writes["docs"].update(zip(keys, records, strict=True))
        if self._records:
            for doc_id in doc_ids:
                self._records.pop(doc_id, None)
        self.put_many("sigs", keys, [_le_bytes(row) for row in signatures])
        with_sets = [(key, hashes) for key, hashes in zip(keys, shingle_sets, strict=True) if hashes is not None]
        if with_sets:
            self.put_many("sets", [k for k, _ in with_sets], [_le_bytes(h) for _, h in with_sets])

    # -- index ------------------------------------------------------------------------------

    # -- index ------------------------------------------------------------------------------
    def exact_group(self, content_hash: bytes) -> list[str]:
        """Ids of the documents whose normalized text has this hash (first: the indexed one)."""
        return self._id_list("exact", content_hash)

    def exact_group_view(self, content_hash: bytes) -> Sequence[str]:
        """:meth:`exact_group` without its copy (the caller must not modify it)."""
        ids = self._decoded_value("exact", content_hash, orjson.loads)
        return () if ids is None else ids

    def exact_group_head(self, content_hash: bytes) -> str | None:
        """The first (indexed) member of a content group, or None: :meth:`exact_group` without its copy."""
        ids = self._decoded_value("exact", content_hash, orjson.loads)
        return ids[0] if ids else None

    def put_exact_group(self, content_hash: bytes, ids: list[str]) -> None:
        """Replace an exact-content group (empty deletes it)."""
        self._put_id_list("exact", content_hash, ids)

    def add_to_exact_group(self, content_hash: bytes, doc_id: str) -> None:
        """Append a member to a content group (created if new).

        Appends in place and encodes the group once per batch: a group of N copies costs O(N)
        a batch, not O(N) an arrival (``bench/bench_groups.py``).
        """
        # decoded and appended in place (not _append's undecoded tail): a group appended to is
        # read again in the same batch (its head, its representatives), so it is decoded anyway
        self._own_list("exact", content_hash, orjson.loads).append(doc_id)
        self._stage_appended("exact", content_hash)

    def put_new_exact_groups(self, content_hashes: Sequence[bytes], doc_ids: Sequence[str]) -> None:
        """Stage new exact-content groups of one document each, with one overlay write."""
        self.put_many("exact", content_hashes, [dumps([doc_id]) for doc_id in doc_ids])
        self.groups.forget(content_hashes)

    def group_representatives(self, content_hash: bytes) -> list[str]:
        """The members of a content group that are representatives (no ``covered_by``).

        Once the cover is decided a group has at most one (any later member has it as an earlier
        representative at similarity 1.0); during a cover update, two. A large group's answer is
        kept between batches (:class:`~stream_dedupe.storage.groups.GroupRepresentatives`), so
        that it costs O(1) reads, not one per member.
        """
        held = self.groups.get(content_hash)
        if held is not None:
            current = [m for m in held if self._representative_of(m, content_hash)]
            if len(current) != len(held):
                self.groups.keep(content_hash, current)
            return current
        ids = self._decoded_value("exact", content_hash, orjson.loads) or ()
        reps = [m for m in ids if self._representative_of(m, content_hash)]
        if len(ids) >= self.groups.min_size:
            self.groups.keep(content_hash, reps)
        return reps

    def _representative_of(self, doc_id: str, content_hash: bytes) -> bool:
        record = self.doc(doc_id)
        return record is not None and record.covered_by is None and record.content_hash == content_hash

    def edges(self, doc_id: str) -> list[Edge]:
        """Verified pairs of a document: ``(other id, similarity, exact)``."""
        edges = self._decoded_value("edges", _key(doc_id), _decode_edges)
        return [] if edges is None else list(edges)

    def put_edges(self, doc_id: str, edges: list[Edge]) -> None:
        """Replace a document's edges (empty deletes them)."""
        key = _key(doc_id)
        self.put("edges", key, dumps(edges) if edges else None)
        self._decoded["edges"][key] = [(o, float(s), bool(e)) for o, s, e in edges] if edges else None
        if edges:
            self._owned["edges"].add(key)

    def add_edges(self, doc_id: str, edges: Sequence[Edge]) -> None:
        """Append verified pairs to a document's edges, in place (encoded once a batch, as exact groups are)."""
        if not edges:
            return
        key = _key(doc_id)
        added = [(o, float(s), bool(e)) for o, s, e in edges]
        self._append("edges", key, added, _decode_edges)
        near = self._near.get(key)  # held only for a list decoded this batch: appended in place above
        if near is not None:
            near.extend(edge for edge in added if not edge[2])

    def add_edge_to_each(self, doc_id: str, pairs: Sequence[Edge]) -> None:
        """:meth:`add_edges` of ``(doc_id, similarity, exact)`` to each ``(other, similarity, exact)`` of ``pairs``.

        A near copy in a large cluster has hundreds of pairs: one call for all of them.
        """
        append, near_lists = self._append, self._near
        for other, similarity, exact in pairs:
            key = _key(other)
            edge = (doc_id, float(similarity), bool(exact))
            append("edges", key, [edge], _decode_edges)
            if not edge[2] and (near := near_lists.get(key)) is not None:
                near.append(edge)  # held only for a list decoded this batch: appended in place above

    def near_edges(self, doc_id: str) -> list[Edge]:
        """A document's verified pairs that are not exact-content ones (the caller must not modify the list).

        The indexed member of a group of N copies holds N exact edges and few near ones: the
        near ones are filtered once a batch, not at every read.
        """
        key = _key(doc_id)
        near = self._near.get(key)
        if near is None:
            edges = self._decoded_value("edges", key, _decode_edges) or ()
            near = self._near[key] = [edge for edge in edges if not edge[2]]
        return near

    # -- union-find (ClusterStore protocol) --------------------------------------------------
    def get_parent(self, doc_id: str) -> str | None:
        """See :class:`~stream_dedupe.core.unionfind.ClusterStore`."""
        raw = self.get("parent", _key(doc_id))
        return None if raw is None else raw.decode("utf-8")

    def set_parent(self, doc_id: str, parent: str | None) -> None:
        """See :class:`~stream_dedupe.core.unionfind.ClusterStore`."""
        self.put("parent", _key(doc_id), None if parent is None else _key(parent))

    def get_cluster(self, root: str) -> ClusterInfo | None:
        """See :class:`~stream_dedupe.core.unionfind.ClusterStore`."""
        info: ClusterInfo | None = self._decoded_value("clusters", _key(root), _decode_cluster)
        return info

    def set_cluster(self, root: str, info: ClusterInfo | None) -> None:
        """See :class:`~stream_dedupe.core.unionfind.ClusterStore`."""
        if info is None:
            self.put("clusters", _key(root), None)
            return
        c = info.canonical
        key = _key(root)
        self.put("clusters", key, dumps([info.size, info.label, [c.doc_id, c.length, c.updated_at_us]]))
        self._decoded["clusters"][key] = info

    def canonical_key(self, doc_id: str) -> CanonicalKey:
        """See :class:`~stream_dedupe.core.unionfind.ClusterStore`."""
        record = self.doc(doc_id)
        if record is None:
            raise KeyError(f"document {doc_id!r} is not in the state")
        return CanonicalKey(doc_id, record.length, record.updated_at_us)
