"""Committed state values kept in memory between engine batches, within a bound.

:class:`~stream_dedupe.storage.state.StateView` drops its per-batch overlay at every commit; the
:class:`HotCache` beside it keeps, across batches, the values of the small namespaces that the
next batches read again (a duplicate's representative, its cluster, its edges, its exact-content
group, the counts of recurring lines), raw and decoded, so that their multi-gets and decoding are
skipped.

**The one rule: an entry equals what the store holds for its key.** Entries come from two places
only: values read from the store, and values written to it by the view's own successful
:meth:`~stream_dedupe.storage.state.StateView.commit` (write-through). A batch's staged writes
never reach the cache before their commit (a failed and discarded batch leaves the cache as it
was), and a commit whose store write fails clears the whole cache. Anything else that writes the
store while the view lives must call :meth:`~stream_dedupe.storage.state.StateView.invalidate`
(see that method for the audit of every writer).

Audit of the store's writers (the cache is valid only while the view's own commits are the
store's only writes):

* ``StateView.commit`` (write-through; a failed store write clears the cache) and
  ``StateView.discard`` (drops staged writes only; the cache never held them).
* The worker's failed batch (``worker/pipeline.py`` ``_reset_engine``: the poison-record retries,
  and the exactly_once replay, which decides through the same path): ``FaustTableStore.recover``
  re-applies the journal and a new ``DedupeEngine``, with a new view and an empty cache, is built.
* The worker's start-up (``recover``, ``follow.catch_up``, Faust's table recovery) runs before
  the engine exists. The standby ``Follower`` (``worker/follow.py``, RocksDB written directly)
  runs only on a worker that does not own the index partition, and a worker that loses it drops
  its engine (``stop_decide``), so a takeover builds a new engine and view. Faust's own standby
  replicas are off (``table_standby_replicas=0``).
* ``FaustTableStore._drop_changelog_journal`` deletes ``worker:journal:*`` meta keys, which no
  view reads, inside ``recover``.
* Read-only users build views of their own and never commit them (``api_query``, the
  speculative engine of ``api_shadow``, ``exports``, ``explain``, the worker's gauges,
  ``checkpoint.resume_point``); ``rebuild_index``, ``learned_lines`` and retention's
  ``expired_ids`` only read; ``RocksStore.compact`` rewrites files, not values; retention's
  deletions go through the engine (``process`` + ``commit``, ``embedded.py``).

The engine's in-memory LSH index relies on the same single-writer rule. A new writer that runs
while an engine lives must call ``StateView.invalidate()``.

The bound is a number of entries over all tables. Two generations approximate an LRU at the cost
of two dict operations: new entries and entries read again go to the young generation; when it
holds half the bound, the old generation is dropped and the young one becomes old. At most
``limit`` entries are held, and an entry used within the last ``limit / 2`` insertions is kept.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

#: Returned by :meth:`HotCache.lookup` for a key the cache does not hold (None is a value: known absent).
MISS: Any = object()


class HotCache:
    """Bounded two-generation cache of committed values, one table per name.

    Bulk operations work with dict and set operations (C loops): most keys a batch reads are not
    held (new documents), and a Python loop over them would cost more than the reads it saves.

    Args:
        tables: Names of the tables (a namespace's raw values, or its decoded ones).
        limit: At most this many entries in all tables together (0 disables the cache).

    """

    def __init__(self, tables: Iterable[str], limit: int) -> None:
        if limit < 0:
            raise ValueError(f"the state cache bound must be >= 0 entries, got {limit}")
        self.tables = tuple(tables)
        self.limit = limit
        self._half = max(limit // 2, 1)
        self._keep_old = limit >= 2  # a bound of 1 keeps one generation of one entry
        self._young: dict[str, dict[Any, Any]] = {t: {} for t in self.tables}
        self._old: dict[str, dict[Any, Any]] = {t: {} for t in self.tables}
        self._size = 0  # entries in the young generation (all tables)
        #: Keys answered from the cache and keys looked up (statistics for tests and benchmarks).
        self.hits = 0
        self.lookups = 0

    def __len__(self) -> int:
        return sum(len(t) for t in self._young.values()) + sum(len(t) for t in self._old.values())

    def lookup(self, table: str, key: Any) -> Any:
        """The value held for ``key``, or :data:`MISS`; a value found in the old generation moves to the young."""
        self.lookups += 1
        value = self._young[table].get(key, MISS)
        if value is MISS:
            value = self._old[table].pop(key, MISS)
            if value is MISS:
                return MISS
            self.put(table, {key: value})
        self.hits += 1
        return value

    def take(self, table: str, keys: set[Any]) -> dict[Any, Any]:
        """The values held for those of ``keys`` the cache has (old ones move to the young generation)."""
        self.lookups += len(keys)
        young = self._young[table]
        found = {k: young[k] for k in young.keys() & keys}  # a view & a set: a C loop over the smaller
        old = self._old[table]
        if old and len(found) < len(keys):
            promoted = {k: old.pop(k) for k in old.keys() & keys.difference(found)}
            if promoted:
                self.put(table, promoted)
                found.update(promoted)
        self.hits += len(found)
        return found

    def put(self, table: str, values: dict[Any, Any]) -> None:
        """Hold ``values`` (equal to the store's); a mapping larger than half the bound is not kept."""
        n = len(values)
        if not n or n > self._half or not self.limit:
            if n:
                self.forget(table, values.keys())
            return
        if self._size + n > self._half:
            self._rotate()
        old = self._old[table]
        if old:
            for key in old.keys() & values.keys():  # two views: a loop over the smaller
                del old[key]  # every entry equals the store's: no older value stays behind
        young = self._young[table]
        before = len(young)
        young.update(values)
        self._size += len(young) - before

    def forget(self, table: str, keys: Iterable[Any]) -> None:
        """Drop ``keys`` from ``table`` (their values are no longer known)."""
        young, old = self._young[table], self._old[table]
        wanted = keys if isinstance(keys, set) else set(keys)
        for key in young.keys() & wanted:
            del young[key]
            self._size -= 1
        for key in old.keys() & wanted:
            del old[key]

    def clear(self) -> None:
        """Drop every entry (something else wrote the store, or a write failed)."""
        for t in self.tables:
            self._young[t] = {}
            self._old[t] = {}
        self._size = 0

    def _rotate(self) -> None:
        """The young generation becomes the old one; the old one is dropped."""
        for t in self.tables:
            self._old[t] = self._young[t] if self._keep_old else {}
            self._young[t] = {}
        self._size = 0
