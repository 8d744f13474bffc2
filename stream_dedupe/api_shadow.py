"""A throwaway copy of the engine, for queries about a known id whose content changed (a re-crawl).

A re-crawl first takes the old version out of the index, which can hand its place to documents
it covered, and only then decides the new version; the direct read-only path of
:mod:`stream_dedupe.api_query` answers for new ids only. For a re-crawl the query runs the real
engine's :meth:`~stream_dedupe.core.engine.DedupeEngine.process` on a *shadow* engine that shares
the real one's store, signer and parameters but has its own state overlay (never committed), its
own copy of the learned boilerplate set, its own counters and ``seq``, and a :class:`ShadowLsh`
that records additions and removals beside the real band tables instead of changing them.

Built on the engine's public attributes; if the engine gains attributes, :func:`shadow_engine`
must set them too (the re-crawl tests in ``tests/test_api.py`` would fail first).
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from stream_dedupe.core.batch import BatchPreparer
from stream_dedupe.core.boilerplate import BoilerplateLearner
from stream_dedupe.core.cover import StateCoverGraph
from stream_dedupe.core.engine import DedupeEngine
from stream_dedupe.core.hidden_pairs import HiddenPairs
from stream_dedupe.core.lshindex import LshIndex
from stream_dedupe.core.unionfind import UnionFind
from stream_dedupe.storage.state import StateView


class ShadowLsh(LshIndex):
    """The real band tables, read-only, plus the changes of one speculative batch.

    Args:
        base: The real index (only queried).

    """

    def __init__(self, base: LshIndex) -> None:  # no super().__init__: the tables are the base's
        self.base = base
        self.bucket_cap = base.bucket_cap
        self.removed: set[str] = set()
        self.added: dict[str, np.ndarray] = {}

    def __len__(self) -> int:
        return len(self.base) - len(self.removed) + len(self.added)

    def hashes(self, signatures: np.ndarray) -> np.ndarray:
        """See :class:`LshIndex`."""
        return self.base.hashes(signatures)

    def _extra(self, hashes: np.ndarray) -> set[str]:
        return {doc_id for doc_id, own in self.added.items() if bool(np.any(own == hashes))}

    def query(self, hashes: np.ndarray) -> set[str]:
        """See :class:`LshIndex`."""
        return (self.base.query(hashes) - self.removed) | self._extra(hashes)

    def query_many(self, hashes: np.ndarray) -> set[str]:
        """See :class:`LshIndex`."""
        found = self.base.query_many(hashes) - self.removed
        for row in hashes:
            found |= self._extra(row)
        return found

    def full_bands(self, hashes: np.ndarray) -> np.ndarray:
        """See :class:`LshIndex` (the real tables' buckets: a speculative batch joins none past the cap)."""
        return self.base.full_bands(hashes)

    def add(self, doc_id: str, hashes: np.ndarray) -> tuple[set[str], int]:
        """See :class:`LshIndex` (nothing reaches the real tables)."""
        found = self.query(hashes)
        self.added[doc_id] = hashes
        return found, 0

    def any_match(self, hashes: np.ndarray) -> np.ndarray:
        """See :class:`LshIndex`."""
        return np.array([bool(self.query(row)) for row in hashes], dtype=np.bool_)

    def add_new(self, doc_ids: list[str], hashes: np.ndarray) -> None:
        """See :class:`LshIndex` (nothing reaches the real tables)."""
        for doc_id, row in zip(doc_ids, hashes, strict=True):
            self.added[doc_id] = row

    def remove(self, doc_id: str, hashes: np.ndarray) -> None:
        """See :class:`LshIndex` (the real entries are hidden, not removed)."""
        self.removed.add(doc_id)
        self.added.pop(doc_id, None)


def shadow_engine(engine: DedupeEngine) -> DedupeEngine:
    """A copy of ``engine`` whose decisions change nothing: drop it after use, never commit it."""
    shadow = object.__new__(DedupeEngine)
    state = StateView(engine.store)
    shadow.params, shadow.limits, shadow.store, shadow.state = engine.params, engine.limits, engine.store, state
    shadow.uf = UnionFind(state)
    shadow.signer = engine.signer
    shadow.counters = Counter()
    shadow.hidden = HiddenPairs(state, engine.params, lambda: shadow.lsh, shadow.counters)
    shadow.cover = StateCoverGraph(state, engine.params, shadow.hidden)
    learner = None
    if engine.boilerplate is not None:
        learner = object.__new__(BoilerplateLearner)
        learner.config, learner.state = engine.boilerplate.config, state
        learner.learned = set(engine.boilerplate.learned)
        learner.learned_by_source = Counter(engine.boilerplate.learned_by_source)
        # shared, not copied: the shadow's keys only make it hold more than the state (a key it
        # holds is read, so decisions cannot change), and a copy would cost its whole size per query
        learner.known = engine.boilerplate.known
        learner.stripped_lines = 0
        learner.pending = set()
    shadow.boilerplate = learner
    shadow.preparer = BatchPreparer(engine.params, state, engine.signer, learner, shadow.counters)
    shadow.seq = engine.seq
    shadow.lsh = ShadowLsh(engine.lsh)
    return shadow
