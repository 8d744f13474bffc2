"""The cover's shortcuts equal the definitions they replace (canonical order, cover assignment)."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from stream_dedupe.config import DedupeParams
from stream_dedupe.core.canonical import CanonicalKey, better
from stream_dedupe.core.cover import StateCoverGraph, order_key, order_of
from stream_dedupe.storage.memory import MemoryStore
from stream_dedupe.storage.state import DocRecord, StateView

_IDS = st.text(alphabet="abcxyz09", min_size=1, max_size=4)
_KEYS = st.builds(CanonicalKey, _IDS, st.integers(0, 50), st.none() | st.integers(-5, 5))


@given(_KEYS, _KEYS)
@settings(max_examples=300, deadline=None)
def test_order_sorts_the_preferred_document_first(a: CanonicalKey, b: CanonicalKey) -> None:
    """order_of is order_key without the key object, and it sorts as ``better`` chooses."""
    assert order_of(a.doc_id, a.length, a.updated_at_us) == order_key(a)
    if a.doc_id != b.doc_id:
        assert (order_key(a) < order_key(b)) == (better(a, b) == a)


def _record(length: int, updated: int | None, cover: tuple[str, float] | None = None) -> DocRecord:
    rep, similarity = cover if cover is not None else (None, None)
    return DocRecord(b"\x01" * 16, length, updated, 9, True, "wiki", rep, similarity, "t1")


def test_the_state_graph_orders_and_assigns_like_its_definitions() -> None:
    """StateCoverGraph.order == order_key(rank) and assign == dataclasses.replace of the record."""
    state = StateView(MemoryStore())
    graph = StateCoverGraph(state, DedupeParams())
    state.put_doc("a", _record(40, None))
    state.put_doc("b", _record(40, 7, ("a", 0.9)))
    for doc_id in ("a", "b"):
        assert graph.order(doc_id) == order_key(graph.rank(doc_id))
    assert graph.order("b") < graph.order("a")  # same length: the one with a known updated_at first
    before = state.doc("b")
    assert before is not None
    graph.assign("b", None)
    assert state.doc("b") == dataclasses.replace(before, covered_by=None, covered_similarity=None)
    graph.assign("b", ("c", 0.85))
    assert state.doc("b") == dataclasses.replace(before, covered_by="c", covered_similarity=0.85)
    assert graph.assignment("b") == ("c", 0.85)
    replaced = dataclasses.replace(before, covered_by="c", covered_similarity=0.85)
    assert before.with_cover("c", 0.85).encode() == replaced.encode()


def test_covered_by_of_reads_what_decode_reads() -> None:
    """The scan shortcut agrees with decoding, for every record version the state may hold."""
    covered = _record(40, 7, ("a", 0.9))
    kept = _record(40, None)
    assert DocRecord.covered_by_of(covered.encode()) == "a" and DocRecord.covered_by_of(kept.encode()) is None
    for old in (b'[1,"00",5,null,3,true]', b'[2,"00",5,null,3,true,"wiki"]'):  # versions before the cover fields
        assert DocRecord.decode(old).covered_by is None and DocRecord.covered_by_of(old) is None
