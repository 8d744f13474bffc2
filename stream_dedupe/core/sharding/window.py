"""The gather's window on the shards' band tables: the buckets one batch touches, loaded whole.

:class:`BandWindow` is the :class:`~stream_dedupe.core.lshindex.LshIndex` the engine sees in a
sharded index. It holds no table of its own. A bucket (band, high 32 bits of the band hash) is
loaded whole, from every shard at once, the first time the batch touches it (the engine's
batch-wide calls, :meth:`any_match` and :meth:`query_many`, load all of a batch's buckets in one
round), and the batch's changes are applied to the loaded copy as the engine makes them, so each
call answers exactly what one table over the whole index would: the same candidates, and the same
bucket-cap decisions, because the window sees every member of a bucket. The changes are recorded
per owner shard (:meth:`take_ops`) for the commit; until then no shard changes, so a loaded
bucket stays true.

A removal from a bucket that is not loaded is remembered and applied if the bucket is loaded later
in the batch (an addition always loads its buckets first: it needs their members and sizes).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from stream_dedupe.core.lsh import band_hashes
from stream_dedupe.core.lshindex import LshIndex
from stream_dedupe.core.sharding.ops import BandOp, ShardOps

#: ``fetch(bands, keys)``: the members of the buckets ``(bands[i], keys[i])`` over all shards,
#: as ``(i of each member, member ids)``.
Fetch = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, list[str]]]
_LOW = np.uint64(0xFFFFFFFF)


class BandWindow(LshIndex):
    """The band tables of a sharded index, as one batch of the gather sees them.

    Args:
        bands: Number of bands.
        rows: Rows per band.
        bucket_cap: A bucket with this many members is not joined (a hot bucket).
        fetch: Loads whole buckets from the shards.
        owner: The shard that owns a document id.
        shards: Number of shards.

    """

    def __init__(  # no super().__init__: the tables are the shards'
        self, bands: int, rows: int, bucket_cap: int, fetch: Fetch, owner: Callable[[str], int], shards: int
    ) -> None:
        self.bands, self.rows, self.bucket_cap = bands, rows, bucket_cap
        self.fetch, self.owner, self.shards = fetch, owner, shards
        self._band_ids = np.arange(bands, dtype=np.uint64) << np.uint64(32)
        self.loaded: dict[int, list[str]] = {}
        self._removed: dict[int, set[str]] = {}
        self._ops: list[list[BandOp]] = [[] for _ in range(shards)]
        self.fetches = 0
        self.buckets_fetched = 0
        self._skipped = np.zeros(bands, dtype=np.uint8)

    def __len__(self) -> int:
        raise TypeError("a sharded index has no size of its own: ask its shards (IndexShard.documents)")

    def hashes(self, signatures: np.ndarray) -> np.ndarray:
        """Band hashes of ``(n, num_perm)`` signatures."""
        return band_hashes(signatures, self.bands, self.rows)

    def _buckets(self, hashes: np.ndarray) -> np.ndarray:
        """Bucket ids (band << 32 | key) of ``(n, bands)`` or ``(bands,)`` band hashes."""
        return self._band_ids | (hashes >> np.uint64(32))

    def _load(self, buckets: np.ndarray) -> None:
        missing = [b for b in dict.fromkeys(buckets.ravel().tolist()) if b not in self.loaded]
        if not missing:
            return
        wanted = np.array(missing, dtype=np.uint64)
        idx, ids = self.fetch((wanted >> np.uint64(32)).astype(np.int32), (wanted & _LOW).astype(np.uint32))
        self.fetches += 1
        self.buckets_fetched += len(missing)
        lists: list[list[str]] = [[] for _ in missing]
        for i, member in zip(idx.tolist(), ids, strict=True):
            lists[i].append(member)
        loaded, removed = self.loaded, self._removed
        for bucket, members in zip(missing, lists, strict=True):
            loaded[bucket] = members
            gone = removed.pop(bucket, None) if removed else None
            if gone:
                members[:] = [m for m in members if m not in gone]

    def _record(self, index: bool, doc_id: str, buckets: list[int]) -> None:
        ids = np.array(buckets, dtype=np.uint64)
        op = BandOp(index, doc_id, (ids >> np.uint64(32)).astype(np.int32), (ids & _LOW).astype(np.uint32))
        self._ops[self.owner(doc_id)].append(op)

    def add(self, doc_id: str, hashes: np.ndarray) -> tuple[set[str], int]:
        """Candidates of a document (ids sharing a band), then index it (unless a bucket is full).

        Returns:
            ``(candidate ids, buckets that were full)``.

        """
        buckets = self._buckets(hashes)
        self._load(buckets)
        found: set[str] = set()
        joined = []
        full = 0
        self._skipped = np.zeros(self.bands, dtype=np.uint8)
        for band, bucket in enumerate(buckets.tolist()):
            members = self.loaded[bucket]
            found.update(members)
            if len(members) >= self.bucket_cap:
                full += 1
                self._skipped[band] = 1
            else:
                members.append(doc_id)
                joined.append(bucket)
        self._record(True, doc_id, joined)
        return found, full

    def query(self, hashes: np.ndarray) -> set[str]:
        """Ids sharing a band with ``hashes`` (nothing is indexed)."""
        buckets = self._buckets(hashes)
        self._load(buckets)
        found: set[str] = set()
        for bucket in buckets.tolist():
            found.update(self.loaded[bucket])
        return found

    def query_many(self, hashes: np.ndarray) -> set[str]:
        """Ids sharing a band with any of the ``(n, bands)`` rows of ``hashes`` (one round to the shards)."""
        buckets = self._buckets(hashes)
        self._load(buckets)
        found: set[str] = set()
        for bucket in set(buckets.ravel().tolist()):
            found.update(self.loaded[bucket])
        return found

    def any_match(self, hashes: np.ndarray) -> np.ndarray:
        """Per row of the ``(n, bands)`` ``hashes``: True if an indexed document shares a band with it."""
        buckets = self._buckets(hashes)
        self._load(buckets)
        loaded = self.loaded
        return np.array([any(loaded[b] for b in row) for row in buckets.tolist()], dtype=np.bool_)

    def skipped_bands(self) -> np.ndarray:
        """See :class:`LshIndex` (the shards keep each document's joined bands themselves)."""
        return self._skipped.copy()

    def full_bands(self, hashes: np.ndarray) -> np.ndarray:
        """Per band of a document's ``(bands,)`` hashes: True if its bucket holds ``bucket_cap`` members or more."""
        buckets = self._buckets(hashes)
        self._load(buckets)
        loaded, cap = self.loaded, self.bucket_cap
        return np.array([len(loaded[b]) >= cap for b in buckets.tolist()], dtype=np.bool_)

    def add_new(self, doc_ids: list[str], hashes: np.ndarray) -> None:
        """Index documents that share no band with any indexed one, nor with each other."""
        buckets = self._buckets(hashes)
        self._load(buckets)
        for doc_id, row in zip(doc_ids, buckets.tolist(), strict=True):
            for bucket in row:
                self.loaded[bucket].append(doc_id)
            self._record(True, doc_id, row)

    def remove(self, doc_id: str, hashes: np.ndarray) -> None:
        """Take a document's entries out of the buckets."""
        buckets = self._buckets(hashes).tolist()
        for bucket in buckets:
            members = self.loaded.get(bucket)
            if members is None:
                self._removed.setdefault(bucket, set()).add(doc_id)
            elif doc_id in members:
                members[:] = [m for m in members if m != doc_id]
        self._record(False, doc_id, buckets)

    def take_ops(self) -> list[ShardOps]:
        """The batch's band changes per shard, and a fresh window (the shards now hold them)."""
        ops = [ShardOps(bands=shard_ops) for shard_ops in self._ops]
        self.reset()
        return ops

    def reset(self) -> None:
        """Forget every loaded bucket and recorded change (after a commit, or to drop a batch)."""
        self.loaded.clear()
        self._removed.clear()
        self._ops = [[] for _ in range(self.shards)]
