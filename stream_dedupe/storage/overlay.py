"""The batch overlay under :class:`~stream_dedupe.storage.state.StateView`: cached reads, held-back writes.

Reads of one engine batch are cached, writes are held back, and :meth:`BatchOverlay.commit`
applies them as one atomic batch; committed values of the small namespaces can be kept between
batches (:mod:`~stream_dedupe.storage.hot`). Decoded values (document records, id and edge lists,
cluster records) are kept beside the raw bytes, and a list a batch appends to is encoded once, at
commit. This module knows bytes, JSON lists and document records, no algorithm; the typed
accessors are :class:`~stream_dedupe.storage.state.StateView`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import orjson

from stream_dedupe.storage.base import NAMESPACES, KVStore
from stream_dedupe.storage.docrecord import DocRecord, dumps
from stream_dedupe.storage.hot import MISS, HotCache

__all__ = ["DEFAULT_CACHE_ENTRIES", "HOT_NAMESPACES", "BatchOverlay"]

#: Namespaces whose decoded values the overlay keeps for the batch (``docs`` is kept apart, by id).
DECODED = ("exact", "edges", "clusters")
#: Namespaces whose committed values are kept between batches (:mod:`~stream_dedupe.storage.hot`):
#: the small ones that later batches read again. Not ``documents``, ``sigs`` and ``sets``: about
#: 3.5 KB a document together, most of them never read again.
HOT_NAMESPACES = ("meta", "docs", "exact", "parent", "clusters", "edges", "boilerplate")
#: Default bound of that cache, in entries over all its tables (``RuntimeLimits.state_cache_entries``):
#: off, because it did not pay on the decide benchmark (BENCHMARKS.md, "The decide path, batch at a time").
DEFAULT_CACHE_ENTRIES = 0
#: The hot table of decoded document records, keyed by id.
RECORDS = "docs~"
#: Namespaces whose lists a batch appends to in place (:meth:`BatchOverlay._own_list`) and encodes once, at commit.
APPENDED = ("exact", "edges")
#: What the overlay holds for a key whose appended value is not encoded yet (:meth:`BatchOverlay.get` encodes it).
_PENDING = b"\x00pending"


class BatchOverlay:
    """Batch-scoped reads and writes over a :class:`~stream_dedupe.storage.base.KVStore`.

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
        self._decoded: dict[str, dict[bytes, Any]] = {ns: {} for ns in DECODED}
        #: Keys of ``APPENDED`` namespaces whose decoded list is this batch's own copy (appended in place).
        self._owned: dict[str, set[bytes]] = {ns: set() for ns in APPENDED}
        #: Keys of ``APPENDED`` namespaces appended to and not encoded yet (``_PENDING`` in the overlay).
        self._pending: dict[str, set[bytes]] = {ns: set() for ns in APPENDED}
        #: Items appended to lists this batch has not decoded, with the raw value they extend (:meth:`_append`).
        self._tails: dict[str, dict[bytes, tuple[bytes | None, list[Any]]]] = {ns: {} for ns in APPENDED}
        self.hot = HotCache([*HOT_NAMESPACES, RECORDS, *(ns + "~" for ns in DECODED)], cache_entries)

    def resize_cache(self, entries: int) -> None:
        """Bound the cache of committed values to ``entries`` (dropping what it holds)."""
        self.hot = HotCache(self.hot.tables, entries)

    def invalidate(self) -> None:
        """Forget the committed values held between batches: call after writing the store by another path.

        :mod:`stream_dedupe.storage.hot` lists every writer of the store and why none of them needs
        this today (each runs before the view exists, or on a worker whose engine is rebuilt).
        """
        self.hot.clear()
        self._records_rewritten()

    # -- what a subclass derives from the values (kept in step by these hooks) ---------------------
    def _records_rewritten(self) -> None:
        """Document records were written raw, dropped unwritten, or changed under the view."""

    def _list_rewritten(self, namespace: str, key: bytes) -> None:
        """The decoded list of ``key`` in ``namespace`` was replaced by a raw write."""

    def _batch_dropped(self) -> None:
        """The batch's overlay was dropped (committed or discarded)."""

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
            self._records_rewritten()
        elif namespace in DECODED:
            self._forget_decoded(namespace, key)

    def put_many(self, namespace: str, keys: Sequence[bytes], values: Sequence[bytes | None]) -> None:
        """Write many keys into the overlay at once (None deletes)."""
        self._cache[namespace].update(zip(keys, values, strict=True))
        self._writes[namespace].update(zip(keys, values, strict=True))
        if namespace == "docs":
            self._records_rewritten()
            if self._records:
                for key in keys:
                    self._records.pop(key.decode("utf-8"), None)
        elif namespace in DECODED:
            for key in keys:
                self._forget_decoded(namespace, key)

    def _forget_decoded(self, namespace: str, key: bytes) -> None:
        """Drop what this batch holds decoded for ``key`` (its raw value was just written)."""
        self._decoded[namespace].pop(key, None)
        if namespace in APPENDED:
            self._owned[namespace].discard(key)
            self._pending[namespace].discard(key)
            self._tails[namespace].pop(key, None)
            self._list_rewritten(namespace, key)

    def overlay(self, namespace: str) -> tuple[dict[bytes, bytes | None], dict[bytes, bytes | None]]:
        """The batch's read cache and staged writes of a plain namespace, for a loop over many keys.

        A key in the cache is answered from it (a missing key: :meth:`get`); a write goes into
        both dicts, as :meth:`put` does. Saves two method calls a key in the boilerplate count
        loop (about 0.5 us of ~1.4 us a line).

        Raises:
            ValueError: for a namespace with decoded values kept beside it (``docs``, ``exact``,
                ``edges``, ``clusters``): use :meth:`get` and :meth:`put`.

        """
        if namespace == "docs" or namespace in DECODED:
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
            hot.forget(RECORDS, {k.decode("utf-8") for k in written}.difference(records))
        hot.put(RECORDS, records)
        for ns, table in self._decoded.items():
            written = batch.get(ns)
            if written:
                hot.forget(ns + "~", set(written).difference(table))
            hot.put(ns + "~", table)

    def discard(self) -> None:
        """Drop the overlay (uncommitted writes are lost; the cache holds committed values only)."""
        if any(self._writes.values()):
            self._records_rewritten()  # what was derived from the records followed the staged writes
        self._drop_overlay()

    def _drop_overlay(self) -> None:
        for ns in NAMESPACES:
            self._cache[ns].clear()
        self._writes = {ns: {} for ns in NAMESPACES}  # new dicts: the store may keep the batch's
        self._records.clear()
        for table in self._decoded.values():
            table.clear()
        for ns in APPENDED:
            self._owned[ns].clear()
            self._pending[ns].clear()
            self._tails[ns].clear()
        self._batch_dropped()

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

    # -- id and edge lists appended in place ---------------------------------------------------
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

    def _append(self, namespace: str, key: bytes, items: list[Any], decode: Callable[[bytes], Any]) -> None:
        """Append ``items`` to the list of ``key`` (created if missing); encoded once, at commit.

        A list this batch holds decoded is appended to in place (:meth:`_own_list`). One it has
        not decoded is not decoded for this: the items wait in a tail that is joined to the raw
        value when the key is read or committed (:meth:`_encode_pending`), with the bytes that
        encoding the whole list gives. In a cluster of N near copies the first members gain a
        verified pair at every arrival: decoding and encoding their lists again at every batch
        was a quarter of the time and most of the memory (BENCHMARKS.md, "Near copies").
        """
        if key in self._owned[namespace] or key in self._decoded[namespace]:
            self._own_list(namespace, key, decode).extend(items)
            self._stage_appended(namespace, key)
            return
        tail = self._tails[namespace].get(key)
        if tail is not None:
            tail[1].extend(items)
            return
        base = self.get(namespace, key)  # raw, not decoded (an encoded pending list, if any)
        if base is None:  # a new list (a document's first pairs): held decoded, as the batch reads it next
            self._decoded[namespace][key] = list(items)
            self._owned[namespace].add(key)
        else:
            self._tails[namespace][key] = (base, list(items))
        self._stage_appended(namespace, key)

    def _stage_appended(self, namespace: str, key: bytes) -> None:
        """Mark ``key``'s decoded list as written; it is encoded once, when read raw or committed."""
        self._cache[namespace][key] = _PENDING
        self._writes[namespace][key] = _PENDING
        self._pending[namespace].add(key)

    def _encode_pending(self, namespace: str, key: bytes) -> bytes | None:
        """Encode an appended list into the overlay; its raw value."""
        tail = self._tails[namespace].pop(key, None)
        if tail is None:
            value = self._decoded[namespace][key]
            raw = dumps(value) if value else None
        else:
            base, items = tail
            added = dumps(items)
            # dumps([*a, *b]) == dumps(a)[:-1] + b"," + dumps(b)[1:]: JSON lists without whitespace
            raw = added if base is None or len(base) <= 2 else base[:-1] + b"," + added[1:]
        self._cache[namespace][key] = raw
        self._writes[namespace][key] = raw
        self._pending[namespace].discard(key)
        return raw
