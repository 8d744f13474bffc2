"""Pairs a full LSH bucket hid: verified on demand, so that a big cluster of copies keeps one representative.

An LSH bucket stops growing at ``max_bucket_size`` members (a hot bucket: a template that
thousands of distinct pages share must not make every arrival verify thousands of candidates).
A cluster of near copies bigger than the cap fills its own buckets, and a copy that arrives after
that is in none of them: later copies never meet it. When such a copy is a representative (the
longest copy so far, say a counter that gained a digit), the copies after it had no pair with it
and stayed representatives too. Measured before this module: 1,200 near copies of one page with
a counter kept 618 representatives at the default cap of 500 (BENCHMARKS.md, "One large group of
copies").

Two places look for such a pair, and only where a full bucket may have hidden it (the two
documents share a band whose bucket is full), so that nothing changes while no bucket is full:

* an arrival that met a full bucket also verifies the representatives that cover its candidates
  (:meth:`HiddenPairs.covering`);
* a member whose representative stopped being one (a longer copy covers it now) verifies the
  representative that covers its former one (:meth:`HiddenPairs.pair`), before it would become
  a representative itself.

A pair found so is verified exactly as an LSH candidate is (its pair's threshold, the title
guard) and stored as an edge like any other, so the cover stays a function of the verified pairs,
and a restart (which rebuilds the same band tables) decides the same.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import numpy as np

from stream_dedupe.config import DedupeParams
from stream_dedupe.core.candidates import similarity_with_stored, titles_disagree
from stream_dedupe.core.lshindex import LshIndex
from stream_dedupe.storage.state import StateView

_HIGH = np.uint64(32)


class HiddenPairs:
    """Finds and verifies the pairs a full bucket may have kept from being offered.

    Args:
        state: The batch's state view (records, signatures, shingle sets; the edges are written here).
        params: The thresholds and the title guard.
        index: The current band tables (the engine swaps them on a rebuild).
        counters: The engine's counters (``full_bucket_candidates``: representatives verified
            because a full bucket may have hidden them).

    """

    def __init__(
        self, state: StateView, params: DedupeParams, index: Callable[[], LshIndex], counters: Counter[str]
    ) -> None:
        self.state, self.params, self.index, self.counters = state, params, index, counters

    def covering(self, doc_id: str, hashes: np.ndarray, candidates: set[str]) -> set[str]:
        """The representatives that cover ``candidates`` and share a full bucket with the document.

        For an arrival whose band lookup met a full bucket: those representatives may have joined
        no bucket (they arrived when the buckets were full), so the lookup could not offer them.

        Args:
            doc_id: The arriving document.
            hashes: Its band hashes, ``(bands,)``.
            candidates: What its band lookup found.

        """
        full = self.index().full_bands(hashes)
        if not full.any():
            return set()
        state = self.state
        reps: set[str] = set()
        for candidate in candidates:
            record = state.doc(candidate)
            if record is not None and record.covered_by is not None:
                reps.add(record.covered_by)
        reps -= candidates
        reps.discard(doc_id)
        found = {rep for rep in reps if self._share_a_full_bucket(hashes, full, rep)}
        self.counters["full_bucket_candidates"] += len(found)
        return found

    def pair(self, doc_id: str, rep: str) -> float | None:
        """Verify ``doc_id`` with ``rep`` if a full bucket may have hidden their pair; store it as an edge.

        Returns:
            The similarity of a verified pair (now an edge of both), else None (not eligible:
            no full bucket shared; or below the pair's threshold; or refused by the title guard).

        """
        state = self.state
        signature = state.signature(doc_id)
        mine, theirs = state.doc(doc_id), state.doc(rep)
        if signature is None or mine is None or theirs is None:
            return None
        index = self.index()
        hashes = index.hashes(signature.reshape(1, -1))[0]
        if not self._share_a_full_bucket(hashes, index.full_bands(hashes), rep):
            return None
        self.counters["full_bucket_candidates"] += 1
        if self.params.title_guard and titles_disagree(mine.title_key, theirs.title_key):
            return None  # the title guard refuses the pair, as it refuses an LSH candidate
        similarity = similarity_with_stored(state.shingle_set(doc_id), signature, rep, state)
        if similarity < self.params.pair_decision_threshold(mine.source, theirs.source):
            return None
        state.add_edges(doc_id, [(rep, similarity, False)])
        state.add_edges(rep, [(doc_id, similarity, False)])
        return similarity

    def _share_a_full_bucket(self, hashes: np.ndarray, full: np.ndarray, other: str) -> bool:
        signature = self.state.signature(other)
        if signature is None:
            return False
        theirs = self.index().hashes(signature.reshape(1, -1))[0]
        return bool(np.any(full & ((hashes >> _HIGH) == (theirs >> _HIGH))))
