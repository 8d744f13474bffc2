"""Typed access to the engine's state over any :class:`~stream_dedupe.storage.base.KVStore`.

Reads and writes of one engine batch go through an overlay: reads are cached, writes are held
back, and :meth:`StateView.commit` applies them as one atomic batch. This module imports no
storage engine; it works the same over the in-memory and the RocksDB adapters.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from stream_dedupe.model import CanonicalKey, ClusterInfo
from stream_dedupe.storage.base import NAMESPACES, KVStore

_U32 = np.dtype("<u4")


@dataclass(frozen=True)
class DocRecord:
    """What the state keeps about each document.

    Attributes:
        content_hash: 128-bit hash of the normalized text.
        length: Normalized length in characters (canonical policy).
        updated_at_us: ``updated_at`` in microseconds, or None.
        tokens: Number of tokens of the normalized text.
        indexed: True when the document's bands are in the LSH index (it represents its content).
        source: The document's ``source``, or None (retention policies are per source).
        covered_by: The representative that holds this document's place in the index (a verified
            near-duplicate of it), or None when the document is itself a representative.
        covered_similarity: Verified similarity to ``covered_by`` (None for a representative).
        title_key: 8 bytes (hex) identifying the normalized title, or None (no title, or the
            title guard is off): documents with different titles are never near-duplicates.

    """

    content_hash: bytes
    length: int
    updated_at_us: int | None
    tokens: int
    indexed: bool
    source: str | None = None
    covered_by: str | None = None
    covered_similarity: float | None = None
    title_key: str | None = None

    @property
    def representative(self) -> bool:
        """True if the document is in the indexed (deduped) set."""
        return self.covered_by is None

    def encode(self) -> bytes:
        """Versioned JSON encoding (version 2 added ``source``, version 3 the cover fields)."""
        fields: list[Any] = [3, self.content_hash.hex(), self.length, self.updated_at_us, self.tokens, self.indexed]
        fields += [self.source, self.title_key]
        if self.covered_by is not None:
            fields += [self.covered_by, self.covered_similarity]
        return orjson.dumps(fields)

    @staticmethod
    def encode_representative(
        content_hash: bytes,
        length: int,
        updated_at_us: int | None,
        tokens: int,
        indexed: bool,
        source: str | None,
        title_key: str | None,
    ) -> bytes:
        """:meth:`encode` of a representative's record, without building the record first."""
        return orjson.dumps([3, content_hash.hex(), length, updated_at_us, tokens, indexed, source, title_key])

    @classmethod
    def decode(cls, raw: bytes) -> DocRecord:
        """Inverse of :meth:`encode` (reads version 1 and 2 records too)."""
        fields = orjson.loads(raw)
        source = fields[6] if fields[0] >= 2 else None
        title_key = fields[7] if fields[0] >= 3 else None
        covered_by, similarity = (fields[8], fields[9]) if len(fields) > 9 else (None, None)
        return cls(
            content_hash=bytes.fromhex(fields[1]),
            length=fields[2],
            updated_at_us=fields[3],
            tokens=fields[4],
            indexed=fields[5],
            source=source,
            covered_by=covered_by,
            covered_similarity=similarity,
            title_key=title_key,
        )


Edge = tuple[str, float, bool]


def _le_bytes(values: np.ndarray) -> bytes:
    """Little-endian uint32 bytes (no copy-convert on little-endian hosts)."""
    if values.dtype == _U32:
        return values.tobytes()
    return values.astype(_U32).tobytes()


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


#: Namespaces whose decoded values :class:`StateView` keeps for the batch.
_DECODED = ("exact", "edges", "clusters")


class StateView:
    """Batch-scoped, typed view of the state; also the union-find's :class:`ClusterStore`.

    Args:
        store: The key-value store underneath.

    """

    def __init__(self, store: KVStore) -> None:
        self.store = store
        self._cache: dict[str, dict[bytes, bytes | None]] = {ns: {} for ns in NAMESPACES}
        self._dirty: dict[str, set[bytes]] = {ns: set() for ns in NAMESPACES}
        #: Decoded document records of this batch (a record is read many times per decision).
        self._records: dict[str, DocRecord | None] = {}
        #: Decoded values of the JSON namespaces read many times per decision (dropped on write).
        self._decoded: dict[str, dict[bytes, Any]] = {ns: {} for ns in _DECODED}

    # -- raw access -------------------------------------------------------------------------
    def prefetch(self, namespace: str, keys: Sequence[bytes]) -> None:
        """Load many keys with one multi-get (values already in the overlay are kept)."""
        cache = self._cache[namespace]
        missing = list({k for k in keys if k not in cache})
        for key, value in zip(missing, self.store.get_many(namespace, missing), strict=True):
            cache[key] = value

    def get(self, namespace: str, key: bytes) -> bytes | None:
        """Read through the overlay."""
        cache = self._cache[namespace]
        if key not in cache:
            cache[key] = self.store.get_many(namespace, [key])[0]
        return cache[key]

    def put(self, namespace: str, key: bytes, value: bytes | None) -> None:
        """Write into the overlay (None deletes)."""
        self._cache[namespace][key] = value
        self._dirty[namespace].add(key)
        if namespace == "docs":
            self._records.pop(key.decode("utf-8"), None)
        elif namespace in _DECODED:
            self._decoded[namespace].pop(key, None)

    def put_many(self, namespace: str, keys: Sequence[bytes], values: Sequence[bytes | None]) -> None:
        """Write many keys into the overlay at once (None deletes)."""
        self._cache[namespace].update(zip(keys, values, strict=True))
        self._dirty[namespace].update(keys)
        if namespace == "docs" and self._records:
            for key in keys:
                self._records.pop(key.decode("utf-8"), None)
        elif namespace in _DECODED:
            decoded = self._decoded[namespace]
            for key in keys:
                decoded.pop(key, None)

    def mark_absent(self, namespace: str, key: bytes) -> None:
        """Record in the overlay that ``key`` is known to be absent (saves a store read)."""
        self._cache[namespace].setdefault(key, None)

    def commit(self, meta: dict[bytes, bytes | None] | None = None) -> None:
        """Apply every held-back write, plus ``meta`` entries, as one atomic batch."""
        for key, value in (meta or {}).items():
            self.put("meta", key, value)
        batch = {ns: {k: self._cache[ns][k] for k in keys} for ns, keys in self._dirty.items() if keys}
        if batch:
            self.store.write(batch)
        self.discard()

    def discard(self) -> None:
        """Drop the overlay (uncommitted writes are lost)."""
        for ns in NAMESPACES:
            self._cache[ns].clear()
            self._dirty[ns].clear()
        self._records.clear()
        for table in self._decoded.values():
            table.clear()

    def _decoded_value(self, namespace: str, key: bytes, decode: Callable[[bytes], Any]) -> Any:
        """``decode`` of a value read through the overlay, decoded once per batch (None if missing)."""
        table = self._decoded[namespace]
        try:
            return table[key]
        except KeyError:
            pass
        raw = self.get(namespace, key)
        value = None if raw is None else decode(raw)
        table[key] = value
        return value

    def get_json(self, key: bytes) -> Any:
        """A JSON value of the meta namespace, or None."""
        raw = self.get("meta", key)
        return None if raw is None else orjson.loads(raw)

    def put_json(self, key: bytes, value: Any) -> None:
        """Write a JSON value into the meta namespace (None deletes)."""
        self.put("meta", key, None if value is None else orjson.dumps(value))

    # -- documents --------------------------------------------------------------------------
    def doc(self, doc_id: str) -> DocRecord | None:
        """The record of a document, or None if unknown."""
        try:
            return self._records[doc_id]
        except KeyError:
            pass
        raw = self.get("docs", _key(doc_id))
        record = None if raw is None else DocRecord.decode(raw)
        self._records[doc_id] = record
        return record

    def put_doc(self, doc_id: str, record: DocRecord | None) -> None:
        """Write (or delete) a document record."""
        self.put("docs", _key(doc_id), None if record is None else record.encode())
        self._records[doc_id] = record

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

        Args:
            doc_ids: The documents.
            raws: Their original JSON.
            records: Their encoded records (:meth:`DocRecord.encode_representative`).
            signatures: One signature a row.
            shingle_sets: Their shingle sets (None: estimate mode, none stored).

        """
        keys = [_key(doc_id) for doc_id in doc_ids]
        self.put_many("documents", keys, raws)
        self.put_many("docs", keys, records)
        self.put_many("sigs", keys, [_le_bytes(row) for row in signatures])
        with_sets = [(key, hashes) for key, hashes in zip(keys, shingle_sets, strict=True) if hashes is not None]
        if with_sets:
            self.put_many("sets", [k for k, _ in with_sets], [_le_bytes(h) for _, h in with_sets])

    # -- index ------------------------------------------------------------------------------
    def _id_list(self, namespace: str, key: bytes) -> list[str]:
        ids = self._decoded_value(namespace, key, orjson.loads)
        return [] if ids is None else list(ids)

    def _put_id_list(self, namespace: str, key: bytes, ids: list[str]) -> None:
        self.put(namespace, key, orjson.dumps(ids) if ids else None)

    def exact_group(self, content_hash: bytes) -> list[str]:
        """Ids of the documents whose normalized text has this hash (first: the indexed one)."""
        return self._id_list("exact", content_hash)

    def put_exact_group(self, content_hash: bytes, ids: list[str]) -> None:
        """Replace an exact-content group (empty deletes it)."""
        self._put_id_list("exact", content_hash, ids)

    def put_new_exact_groups(self, content_hashes: Sequence[bytes], doc_ids: Sequence[str]) -> None:
        """Stage new exact-content groups of one document each, with one overlay write."""
        self.put_many("exact", content_hashes, [orjson.dumps([doc_id]) for doc_id in doc_ids])

    def edges(self, doc_id: str) -> list[Edge]:
        """Verified pairs of a document: ``(other id, similarity, exact)``."""
        edges = self._decoded_value("edges", _key(doc_id), _decode_edges)
        return [] if edges is None else list(edges)

    def put_edges(self, doc_id: str, edges: list[Edge]) -> None:
        """Replace a document's edges (empty deletes them)."""
        self.put("edges", _key(doc_id), orjson.dumps(edges) if edges else None)

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
        self.put(
            "clusters",
            _key(root),
            orjson.dumps([info.size, info.label, [c.doc_id, c.length, c.updated_at_us]]),
        )

    def canonical_key(self, doc_id: str) -> CanonicalKey:
        """See :class:`~stream_dedupe.core.unionfind.ClusterStore`."""
        record = self.doc(doc_id)
        if record is None:
            raise KeyError(f"document {doc_id!r} is not in the state")
        return CanonicalKey(doc_id, record.length, record.updated_at_us)
