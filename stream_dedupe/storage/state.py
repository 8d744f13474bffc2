"""Typed access to the engine's state over any :class:`~stream_dedupe.storage.base.KVStore`.

Reads and writes of one engine batch go through an overlay: reads are cached, writes are held
back, and :meth:`StateView.commit` applies them as one atomic batch. This module imports no
storage engine; it works the same over the in-memory and the RocksDB adapters.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import orjson

from stream_dedupe.model import CanonicalKey, ClusterInfo
from stream_dedupe.storage.base import NAMESPACES, KVStore
from stream_dedupe.storage.docrecord import DocRecord, dumps
from stream_dedupe.storage.groups import GroupRepresentatives
from stream_dedupe.storage.hot import MISS, HotCache

__all__ = ["DEFAULT_CACHE_ENTRIES", "HOT_NAMESPACES", "DocRecord", "Edge", "StateView", "dumps"]

_U32 = np.dtype("<u4")

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


#: Namespaces whose decoded values :class:`StateView` keeps for the batch (``docs`` is kept apart, by id).
_DECODED = ("exact", "edges", "clusters")
#: Namespaces whose committed values are kept between batches (:mod:`~stream_dedupe.storage.hot`):
#: the small ones that later batches read again. Not ``documents``, ``sigs`` and ``sets``: about
#: 3.5 KB a document together, most of them never read again.
HOT_NAMESPACES = ("meta", "docs", "exact", "parent", "clusters", "edges", "boilerplate")
#: Default bound of that cache, in entries over all its tables (``RuntimeLimits.state_cache_entries``):
#: off, because it did not pay on the decide benchmark (BENCHMARKS.md, "The decide path, batch at a time").
DEFAULT_CACHE_ENTRIES = 0
_RECORDS = "docs~"  # the hot table of decoded document records, keyed by id
#: Namespaces whose lists a batch appends to in place (:meth:`StateView.add_edges`,
#: :meth:`StateView.add_to_exact_group`) and encodes once, at commit.
_APPENDED = ("exact", "edges")
#: What the overlay holds for a key whose appended value is not encoded yet (:meth:`StateView.get` encodes it).
_PENDING = b"\x00pending"


class StateView:
    """Batch-scoped, typed view of the state; also the union-find's :class:`ClusterStore`.

    Reads go through the batch's overlay, then the :class:`~stream_dedupe.storage.hot.HotCache`
    of committed values, then the store; writes stay in the overlay until :meth:`commit`.

    Args:
        store: The key-value store underneath.
        cache_entries: Bound of the cache of committed values kept between batches (0: none).

    """

    #: Keep decoded values (records, edge lists) between batches too, not only raw bytes.
    keep_decoded = True

    def __init__(self, store: KVStore, cache_entries: int = DEFAULT_CACHE_ENTRIES) -> None:
        self.store = store
        self._cache: dict[str, dict[bytes, bytes | None]] = {ns: {} for ns in NAMESPACES}
        #: The batch's writes (also in ``_cache``): handed to the store as they are at commit.
        self._writes: dict[str, dict[bytes, bytes | None]] = {ns: {} for ns in NAMESPACES}
        #: Decoded document records of this batch (a record is read many times per decision).
        self._records: dict[str, DocRecord | None] = {}
        #: Decoded values of the JSON namespaces read many times per decision (dropped on write).
        self._decoded: dict[str, dict[bytes, Any]] = {ns: {} for ns in _DECODED}
        #: Keys of ``_APPENDED`` namespaces whose decoded list is this batch's own copy (appended in place).
        self._owned: dict[str, set[bytes]] = {ns: set() for ns in _APPENDED}
        #: Keys of ``_APPENDED`` namespaces appended to and not encoded yet (``_PENDING`` in the overlay).
        self._pending: dict[str, set[bytes]] = {ns: set() for ns in _APPENDED}
        #: The verified pairs of a document that are not exact-content ones, by key (this batch).
        self._near: dict[bytes, list[Edge]] = {}
        #: The representatives of large content groups, kept between batches (see :meth:`group_representatives`).
        self.groups = GroupRepresentatives()
        self.hot = HotCache([*HOT_NAMESPACES, _RECORDS, *(ns + "~" for ns in _DECODED)], cache_entries)

    def resize_cache(self, entries: int) -> None:
        """Bound the cache of committed values to ``entries`` (dropping what it holds)."""
        self.hot = HotCache(self.hot.tables, entries)

    def invalidate(self) -> None:
        """Forget the committed values held between batches: call after writing the store by another path.

        :mod:`stream_dedupe.storage.hot` lists every writer of the store and why none of them needs
        this today (each runs before the view exists, or on a worker whose engine is rebuilt).
        """
        self.hot.clear()
        self.groups.clear()

    # -- raw access -------------------------------------------------------------------------
    def prefetch(self, namespace: str, keys: Sequence[bytes], absent: Sequence[bytes] = ()) -> None:
        """Load many keys with one multi-get (values already in the overlay or the cache are not read).

        Args:
            namespace: The namespace.
            keys: Keys to read.
            absent: Keys the caller knows the store does not hold: recorded as missing, not read
                (as :meth:`mark_absent`; a value the overlay holds is kept).

        """
        cache = self._cache[namespace]
        if absent:
            missing_keys = set(absent).difference(cache)
            cache.update(dict.fromkeys(missing_keys))
        wanted = set(keys).difference(cache)  # a C loop over the keys (``set - dict.keys()`` loops over the dict)
        if not wanted:
            return
        if namespace in HOT_NAMESPACES and self.hot.limit:
            held = self.hot.take(namespace, wanted)
            if held:
                cache.update(held)
                wanted -= held.keys()
            if wanted:
                missing = list(wanted)
                read = dict(zip(missing, self.store.get_many(namespace, missing), strict=True))
                cache.update(read)
                self.hot.put(namespace, read)
            return
        missing = list(wanted)
        cache.update(zip(missing, self.store.get_many(namespace, missing), strict=True))

    def get(self, namespace: str, key: bytes) -> bytes | None:
        """Read through the overlay and the cache."""
        cache = self._cache[namespace]
        try:
            value = cache[key]
        except KeyError:
            pass
        else:
            return self._encode_pending(namespace, key) if value is _PENDING else value
        hot = namespace in HOT_NAMESPACES and self.hot.limit > 0
        value = self.hot.lookup(namespace, key) if hot else MISS
        if value is MISS:
            value = self.store.get_many(namespace, [key])[0]
            if hot:
                self.hot.put(namespace, {key: value})
        cache[key] = value
        return value

    def put(self, namespace: str, key: bytes, value: bytes | None) -> None:
        """Write into the overlay (None deletes)."""
        self._cache[namespace][key] = value
        self._writes[namespace][key] = value
        if namespace == "docs":
            self._records.pop(key.decode("utf-8"), None)
            self.groups.clear()  # a raw record write: which members are representatives is not known
        elif namespace in _DECODED:
            self._forget_decoded(namespace, key)

    def put_many(self, namespace: str, keys: Sequence[bytes], values: Sequence[bytes | None]) -> None:
        """Write many keys into the overlay at once (None deletes)."""
        self._cache[namespace].update(zip(keys, values, strict=True))
        self._writes[namespace].update(zip(keys, values, strict=True))
        if namespace == "docs":
            self.groups.clear()  # raw record writes: which members are representatives is not known
            if self._records:
                for key in keys:
                    self._records.pop(key.decode("utf-8"), None)
        elif namespace in _DECODED:
            for key in keys:
                self._forget_decoded(namespace, key)

    def _forget_decoded(self, namespace: str, key: bytes) -> None:
        """Drop what this batch holds decoded for ``key`` (its raw value was just written)."""
        self._decoded[namespace].pop(key, None)
        if namespace in _APPENDED:
            self._owned[namespace].discard(key)
            self._pending[namespace].discard(key)
            if namespace == "edges":
                self._near.pop(key, None)

    def overlay(self, namespace: str) -> tuple[dict[bytes, bytes | None], dict[bytes, bytes | None]]:
        """The batch's read cache and staged writes of a plain namespace, for a loop over many keys.

        A key in the cache is answered from it (a missing key: :meth:`get`); a write goes into
        both dicts, as :meth:`put` does. Saves two method calls a key in the boilerplate count
        loop (about 0.5 us of ~1.4 us a line).

        Raises:
            ValueError: for a namespace with decoded values kept beside it (``docs``, ``exact``,
                ``edges``, ``clusters``): use :meth:`get` and :meth:`put`.

        """
        if namespace == "docs" or namespace in _DECODED:
            raise ValueError(f"namespace {namespace!r} keeps decoded values: use get() and put()")
        return self._cache[namespace], self._writes[namespace]

    def staged(self, namespace: str, key: bytes) -> bool:
        """True if this batch wrote ``key`` (its value in the overlay is not the store's)."""
        return key in self._writes[namespace]

    def mark_absent(self, namespace: str, key: bytes) -> None:
        """Record in the overlay that ``key`` is known to be absent (saves a store read)."""
        self._cache[namespace].setdefault(key, None)

    def commit(self, meta: dict[bytes, bytes | None] | None = None) -> None:
        """Apply every held-back write, plus ``meta`` entries, as one atomic batch.

        The written values then replace the cache's (write-through), with the decoded values of
        this batch; if the store write fails the cache is cleared (the store may hold part of it).
        """
        for key, value in (meta or {}).items():
            self.put("meta", key, value)
        for namespace, keys in self._pending.items():
            for key in list(keys):
                self._encode_pending(namespace, key)
        batch = {ns: writes for ns, writes in self._writes.items() if writes}
        if batch:
            try:
                self.store.write(batch)
            except BaseException:
                self.hot.clear()
                raise
        if self.hot.limit:
            self._write_through(batch)
        self._drop_overlay()

    def _write_through(self, batch: dict[str, dict[bytes, bytes | None]]) -> None:
        """Put the committed values of ``batch`` and the batch's decoded values into the cache."""
        hot = self.hot
        for ns, ops in batch.items():
            if ns in HOT_NAMESPACES:
                hot.put(ns, ops)
        if not self.keep_decoded:
            return
        # Decoded values: current for every key of the batch (a write drops or replaces its own);
        # a written key whose decoded value this batch does not hold is forgotten.
        records = self._records
        written = batch.get("docs")
        if written:
            hot.forget(_RECORDS, {k.decode("utf-8") for k in written}.difference(records))
        hot.put(_RECORDS, records)
        for ns, table in self._decoded.items():
            written = batch.get(ns)
            if written:
                hot.forget(ns + "~", set(written).difference(table))
            hot.put(ns + "~", table)

    def discard(self) -> None:
        """Drop the overlay (uncommitted writes are lost; the cache holds committed values only)."""
        if any(self._writes.values()):
            self.groups.clear()  # it followed the staged writes
        self._drop_overlay()

    def _drop_overlay(self) -> None:
        for ns in NAMESPACES:
            self._cache[ns].clear()
        self._writes = {ns: {} for ns in NAMESPACES}  # new dicts: the store may keep the batch's
        self._records.clear()
        for table in self._decoded.values():
            table.clear()
        for ns in _APPENDED:
            self._owned[ns].clear()
            self._pending[ns].clear()
        self._near.clear()

    def _decoded_value(self, namespace: str, key: bytes, decode: Callable[[bytes], Any]) -> Any:
        """``decode`` of a value read through the overlay, decoded once (None if missing)."""
        table = self._decoded[namespace]
        try:
            return table[key]
        except KeyError:
            pass
        if self.hot.limit and key not in self._writes[namespace]:
            value = self.hot.lookup(namespace + "~", key)
            if value is not MISS:
                table[key] = value
                return value
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
        self.put("meta", key, None if value is None else dumps(value))

    # -- documents --------------------------------------------------------------------------
    def doc(self, doc_id: str) -> DocRecord | None:
        """The record of a document, or None if unknown."""
        try:
            return self._records[doc_id]
        except KeyError:
            pass
        key = _key(doc_id)
        if self.hot.limit and key not in self._writes["docs"]:
            held = self.hot.lookup(_RECORDS, doc_id)
            if held is not MISS:
                self._records[doc_id] = held
                return held  # type: ignore[no-any-return]
        raw = self.get("docs", key)
        record = None if raw is None else DocRecord.decode(raw)
        self._records[doc_id] = record
        return record

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
    def _id_list(self, namespace: str, key: bytes) -> list[str]:
        ids = self._decoded_value(namespace, key, orjson.loads)
        return [] if ids is None else list(ids)

    def _put_id_list(self, namespace: str, key: bytes, ids: list[str]) -> None:
        self.put(namespace, key, dumps(ids) if ids else None)
        self._decoded[namespace][key] = list(ids) if ids else None  # what reading it back decodes to
        if ids:
            self._owned[namespace].add(key)

    def _own_list(self, namespace: str, key: bytes, decode: Callable[[bytes], Any]) -> list[Any]:
        """The decoded list of ``key`` as this batch's own copy, to append to in place."""
        table, owned = self._decoded[namespace], self._owned[namespace]
        if key in owned:
            return table[key]  # type: ignore[no-any-return]
        value = self._decoded_value(namespace, key, decode)
        mine: list[Any] = [] if value is None else list(value)  # never the cache's (committed) list
        table[key] = mine
        owned.add(key)
        return mine

    def _stage_appended(self, namespace: str, key: bytes) -> None:
        """Mark ``key``'s decoded list as written; it is encoded once, when read raw or committed."""
        self._cache[namespace][key] = _PENDING
        self._writes[namespace][key] = _PENDING
        self._pending[namespace].add(key)

    def _encode_pending(self, namespace: str, key: bytes) -> bytes | None:
        """Encode an appended list into the overlay; its raw value."""
        value = self._decoded[namespace][key]
        raw = dumps(value) if value else None
        self._cache[namespace][key] = raw
        self._writes[namespace][key] = raw
        self._pending[namespace].discard(key)
        return raw

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
        self._own_list("edges", key, _decode_edges).extend(added)
        near = self._near.get(key)
        if near is not None:
            near.extend(edge for edge in added if not edge[2])
        self._stage_appended("edges", key)

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
