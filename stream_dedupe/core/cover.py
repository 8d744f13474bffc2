"""Representatives: which members of a cluster stay in the index, so that no dropped one is lost.

Union-find clusters are transitive: A ~ B and B ~ C put A and C together even when A and C share
little (templated pages chain this way). Dropping every member but one canonical would then drop
documents that nothing in the index covers. The *cover* fixes what the index keeps instead:

* walk a cluster's members in canonical order (longest normalized text, then newest, then
  smallest id; :mod:`stream_dedupe.core.canonical`);
* a member is **covered** when it has a verified pair (at or above its pair's threshold) with a
  representative earlier in that order: it is assigned to the most similar one (ties: the earlier
  one) and leaves the index;
* otherwise it is a **representative** and stays in the index.

So every dropped document is verified-similar to the representative that replaces it, by
construction, and the result is a function of the documents and their verified pairs alone
(never of arrival order or batching). The cluster's canonical is always a representative.

The cover is kept incrementally. A member's decision depends only on members earlier in the order,
so when documents arrive or leave, only the members after them that are linked to a member whose
representative status flipped are looked at again, in order, with a priority queue
(:func:`update_cover`); a copy that is shorter than its original (the common case) costs one look.

The verified pairs are the LSH candidates that passed verification, plus the pairs a full LSH
bucket hid, verified when a member would otherwise lose its cover
(:meth:`CoverGraph.successor`, :mod:`~stream_dedupe.core.hidden_pairs`).

Identical normalized texts form one *content group*; the LSH pairs of a group are held by its
indexed member, so a member's neighbours are its group plus the groups its group is paired with
(:class:`StateCoverGraph`), whatever member of a group arrived first.

A decided content group has at most one representative (every later member has it as an earlier
representative at similarity 1.0), and only representatives can cover. So a decision reads the
*candidates* (the representatives among the neighbours: one per paired group) and only a status
flip reads every neighbour: a copy joining a group of N costs O(1) reads, not O(N)
(``bench/bench_groups.py``).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from stream_dedupe.config import DedupeParams
from stream_dedupe.core.canonical import CanonicalKey
from stream_dedupe.core.hidden_pairs import HiddenPairs
from stream_dedupe.storage.state import DocRecord, StateView

#: ``(representative id, similarity)`` of a covered document; None for a representative.
Assignment = tuple[str, float] | None


#: Sort key of the canonical order (:func:`order_key`).
Order = tuple[int, int, int, str]


def order_key(key: CanonicalKey) -> Order:
    """Sort key of the canonical order: the preferred document sorts first."""
    return order_of(key.doc_id, key.length, key.updated_at_us)


def order_of(doc_id: str, length: int, updated_at_us: int | None) -> Order:
    """:func:`order_key` of a document's fields, without building its :class:`CanonicalKey`."""
    if updated_at_us is None:
        return (-length, 0, 0, doc_id)
    return (-length, -1, -updated_at_us, doc_id)


class CoverGraph(Protocol):
    """What the cover reads and writes: ranks, verified neighbours, assignments."""

    def rank(self, doc_id: str) -> CanonicalKey:
        """The canonical key of a document in the state."""

    def order(self, doc_id: str) -> Order:
        """``order_key(rank(doc_id))``: the document's place in the canonical order."""

    def neighbours(self, doc_id: str) -> dict[str, float]:
        """Documents with a pair at or above its threshold with ``doc_id``, and the similarity."""

    def candidates(self, doc_id: str) -> tuple[dict[str, float], bool]:
        """Neighbours that include every one that is a representative now, with the same similarities.

        Returns:
            The candidates, and True when they are every neighbour (no :meth:`neighbours` call needed).

        """

    def assignment(self, doc_id: str) -> Assignment:
        """Who covers ``doc_id`` (None: it is a representative)."""

    def assign(self, doc_id: str, assignment: Assignment) -> None:
        """Record who covers ``doc_id``."""

    def successor(self, doc_id: str, former: str) -> Assignment:
        """A verified pair of ``doc_id`` with the representative that now covers ``former``, if one was hidden.

        ``former`` covered ``doc_id`` and is covered itself now; a full LSH bucket may have kept
        the pair of ``doc_id`` with its successor from being offered
        (:mod:`~stream_dedupe.core.hidden_pairs`). Returns ``(representative, similarity)`` of
        a pair verified now (and stored), else None.
        """


@dataclass(frozen=True)
class CoverChange:
    """A document whose place in the index changed.

    Attributes:
        doc_id: The document.
        before: Its assignment before (None: it was a representative).
        after: Its assignment now.

    """

    doc_id: str
    before: Assignment
    after: Assignment

    @property
    def flipped(self) -> bool:
        """True if the document entered or left the set of representatives."""
        return (self.before is None) != (self.after is None)


def later_neighbours(graph: CoverGraph, doc_id: str) -> list[str]:
    """Neighbours of ``doc_id`` after it in canonical order (those its status can affect)."""
    order = graph.order
    mine = order(doc_id)
    return [other for other in graph.neighbours(doc_id) if order(other) > mine]


def decide_one(graph: CoverGraph, doc_id: str, neighbours: dict[str, float]) -> Assignment:
    """The assignment of one document given the current status of the members before it."""
    order, assignment = graph.order, graph.assignment
    mine = order(doc_id)
    best: tuple[tuple[float, Order], str, float] | None = None
    for other, similarity in neighbours.items():
        theirs = order(other)
        if theirs < mine and assignment(other) is None:
            candidate = (-similarity, theirs)
            if best is None or candidate < best[0]:
                best = (candidate, other, similarity)
    return None if best is None else (best[1], best[2])


def update_cover(graph: CoverGraph, seeds: Iterable[str], arrived: Iterable[str] = ()) -> list[CoverChange]:
    """Re-decide ``seeds`` and every member their changes reach, in canonical order.

    Args:
        graph: The state.
        seeds: Documents in the state whose neighbours changed (the later neighbours of a
            representative that left).
        arrived: Documents just written to the state (new or re-crawled): decided too, and a
            representative among them is a change for the members after it.

    Returns:
        Every document whose assignment changed, in the order they were decided.

    """
    fresh = set(arrived)
    order = graph.order
    heap = [(order(s), s) for s in set(seeds) | fresh]
    heapq.heapify(heap)
    queued = {s for _, s in heap}
    changes: list[CoverChange] = []
    while heap:
        mine, doc_id = heapq.heappop(heap)
        before = graph.assignment(doc_id)
        candidates, complete = graph.candidates(doc_id)
        after = decide_one(graph, doc_id, candidates)
        if (
            after is None
            and before is not None
            and doc_id not in fresh
            and _still_paired(graph, doc_id, before[0], candidates, complete)
        ):
            # Its representative left the set; a pair with the one that covers it now may have been hidden.
            found = graph.successor(doc_id, before[0])
            if found is not None:
                candidates = {**candidates, found[0]: found[1]}
                after = decide_one(graph, doc_id, candidates)
        if after != before:
            graph.assign(doc_id, after)
            changes.append(CoverChange(doc_id, before, after))
        if doc_id in fresh:
            # An arrival is staged as a representative that no other member has seen yet: only
            # if it stays one do the members after it have a new representative to look at.
            if after is not None:
                continue
        elif (before is None) == (after is None):
            continue
        for other in candidates if complete else graph.neighbours(doc_id):
            if other in queued:
                continue
            theirs = order(other)
            if theirs > mine:
                queued.add(other)
                heapq.heappush(heap, (theirs, other))
    return changes


def _still_paired(graph: CoverGraph, doc_id: str, former: str, candidates: dict[str, float], complete: bool) -> bool:
    """True if ``doc_id`` still has its pair with ``former`` (so the one covering ``former`` is in its cluster).

    A former representative that left (a re-crawl detached it) took the pair with it: its
    successor may be in another cluster, and a pair across clusters must join them with events.
    """
    return former in candidates or (not complete and former in graph.neighbours(doc_id))


class StateCoverGraph:
    """The :class:`CoverGraph` of the engine's state (content groups expanded, pair thresholds applied).

    Args:
        state: The batch's state view.
        params: The index parameters (per-source thresholds).
        hidden: Verifies the pairs a full LSH bucket hid (:meth:`successor`); None: no such pairs.

    """

    def __init__(self, state: StateView, params: DedupeParams, hidden: HiddenPairs | None = None) -> None:
        self.state = state
        self.params = params
        self.hidden = hidden

    def _record(self, doc_id: str) -> DocRecord:
        record = self.state.doc(doc_id)
        if record is None:
            raise KeyError(f"document {doc_id!r} is not in the state")
        return record

    def rank(self, doc_id: str) -> CanonicalKey:
        """See :class:`CoverGraph`."""
        record = self._record(doc_id)
        return CanonicalKey(doc_id, record.length, record.updated_at_us)

    def order(self, doc_id: str) -> Order:
        """See :class:`CoverGraph`."""
        record = self._record(doc_id)
        return order_of(doc_id, record.length, record.updated_at_us)

    def assignment(self, doc_id: str) -> Assignment:
        """See :class:`CoverGraph`."""
        record = self._record(doc_id)
        if record.covered_by is None:
            return None
        return record.covered_by, float(record.covered_similarity or 0.0)

    def assign(self, doc_id: str, assignment: Assignment) -> None:
        """See :class:`CoverGraph`."""
        record = self._record(doc_id)
        rep, similarity = assignment if assignment is not None else (None, None)
        self.state.put_doc(doc_id, record.with_cover(rep, similarity))

    def successor(self, doc_id: str, former: str) -> Assignment:
        """See :class:`CoverGraph`."""
        record = self.state.doc(former)
        if self.hidden is None or record is None or record.covered_by in (None, doc_id):
            return None
        similarity = self.hidden.pair(doc_id, record.covered_by)
        return None if similarity is None else (record.covered_by, similarity)

    def neighbours(self, doc_id: str) -> dict[str, float]:
        """See :class:`CoverGraph`.

        Every member of the document's content group (similarity 1.0), and every member of each
        group its group's indexed member is paired with, where the pair reaches its threshold.
        """
        return self._expand(doc_id, every_member=True)[0]

    def candidates(self, doc_id: str) -> tuple[dict[str, float], bool]:
        """See :class:`CoverGraph`: :meth:`neighbours`, with each large group read by its representatives.

        A group of at least ``state.groups.min_size`` members contributes only its
        representatives (:meth:`~stream_dedupe.storage.state.StateView.group_representatives`,
        O(1) reads); a smaller one all its members, as :meth:`neighbours` (so the common case
        reads each group once, for the decision and the propagation both).
        """
        return self._expand(doc_id, every_member=False)

    def _members(self, content_hash: bytes, every_member: bool) -> tuple[Sequence[str], bool]:
        """A group's members, or its representatives when it is large; True if every member."""
        state = self.state
        ids = state.exact_group_view(content_hash)
        if every_member or len(ids) < state.groups.min_size:
            return ids, True
        return state.group_representatives(content_hash), False

    def _expand(self, doc_id: str, every_member: bool) -> tuple[dict[str, float], bool]:
        state = self.state
        record = self._record(doc_id)
        own = record.content_hash
        group, complete = self._members(own, every_member)
        out = {member: 1.0 for member in group if member != doc_id}
        pairs: dict[str, float] = {}
        for head in {doc_id, state.exact_group_head(own) or doc_id}:
            for other, similarity, _ in state.near_edges(head):
                if other != doc_id and other not in out:
                    pairs[other] = max(similarity, pairs.get(other, 0.0))
        if not pairs:
            return out, complete
        state.prefetch_docs(pairs)
        mixed = bool(self.params.source_thresholds)
        for other, similarity in pairs.items():
            other_record = state.doc(other)
            if other_record is None or other_record.content_hash == own:
                continue  # a member of the document's own group is a neighbour at 1.0 already
            far, every = self._members(other_record.content_hash, every_member)
            complete = complete and every
            if not far and every:
                far = [other]  # a paired document with no group stands for itself
            for member in far:
                if member == doc_id or (member in out and out[member] >= similarity):
                    continue
                if mixed:
                    member_record = state.doc(member)
                    source = None if member_record is None else member_record.source
                    if similarity < self.params.pair_decision_threshold(record.source, source):
                        continue
                out[member] = similarity
        return out, complete
