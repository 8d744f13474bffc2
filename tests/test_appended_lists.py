"""Lists appended to in place (verified pairs, content groups) read and store what a plain list would.

:meth:`~stream_dedupe.storage.overlay.BatchOverlay._append` does not decode a list it has not
read this batch: the appended items wait in a tail that is joined to the raw value when the key
is read or committed. These tests drive a view with random sequences of appends, reads, raw
writes, commits and discards, against a model of plain lists, with and without the cache of
committed values.
"""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stream_dedupe.storage.docrecord import dumps
from stream_dedupe.storage.memory import MemoryStore
from stream_dedupe.storage.state import StateView

IDS = ("a", "b")
OTHERS = st.sampled_from(("x", "y", "z", "doc-\u00e9"))
EDGE = st.tuples(OTHERS, st.sampled_from((0.5, 0.953125, 1.0, 0.1 + 0.2)), st.booleans())
OPS = st.one_of(
    st.tuples(st.just("add"), st.sampled_from(IDS), st.lists(EDGE, min_size=1, max_size=3)),
    st.tuples(st.just("put"), st.sampled_from(IDS), st.lists(EDGE, max_size=3)),
    st.tuples(st.just("read"), st.sampled_from(IDS), st.none()),
    st.tuples(st.just("near"), st.sampled_from(IDS), st.none()),
    st.tuples(st.just("raw"), st.sampled_from(IDS), st.none()),
    st.tuples(st.just("group"), st.sampled_from(IDS), OTHERS),
    st.tuples(st.just("new-group"), st.sampled_from(IDS), OTHERS),
    st.tuples(st.just("read-group"), st.sampled_from(IDS), st.none()),
    st.tuples(st.just("commit"), st.none(), st.none()),
    st.tuples(st.just("discard"), st.none(), st.none()),
)


def _edges_bytes(edges: list[tuple[str, float, bool]]) -> bytes | None:
    return dumps([list(e) for e in edges]) if edges else None


@pytest.mark.parametrize("cache_entries", [0, 64])
@settings(max_examples=600, deadline=None)
@given(ops=st.lists(OPS, max_size=40))
def test_appended_lists_match_plain_lists(cache_entries: int, ops: list[tuple[str, object, object]]) -> None:
    store = MemoryStore()
    view = StateView(store, cache_entries)
    committed: dict[str, list[tuple[str, float, bool]]] = {}
    groups_committed: dict[str, list[str]] = {}
    edges = {k: list(v) for k, v in committed.items()}
    groups = {k: list(v) for k, v in groups_committed.items()}
    for op, doc_id, arg in ops:
        if op == "add":
            assert isinstance(doc_id, str) and isinstance(arg, list)
            view.add_edges(doc_id, arg)
            edges.setdefault(doc_id, []).extend(arg)
        elif op == "put":
            assert isinstance(doc_id, str) and isinstance(arg, list)
            view.put_edges(doc_id, arg)
            edges[doc_id] = list(arg)
        elif op == "read":
            assert view.edges(str(doc_id)) == edges.get(str(doc_id), [])
        elif op == "near":
            assert view.near_edges(str(doc_id)) == [e for e in edges.get(str(doc_id), []) if not e[2]]
        elif op == "raw":
            assert view.get("edges", str(doc_id).encode()) == _edges_bytes(edges.get(str(doc_id), []))
        elif op == "group":
            view.add_to_exact_group(str(doc_id).encode(), str(arg))
            groups.setdefault(str(doc_id), []).append(str(arg))
        elif op == "new-group":
            view.put_new_exact_groups([str(doc_id).encode()], [str(arg)])
            groups[str(doc_id)] = [str(arg)]
        elif op == "read-group":
            assert list(view.exact_group_view(str(doc_id).encode())) == groups.get(str(doc_id), [])
        elif op == "commit":
            view.commit()
            committed = {k: list(v) for k, v in edges.items() if v}
            groups_committed = {k: list(v) for k, v in groups.items() if v}
        else:
            view.discard()
            edges = {k: list(v) for k, v in committed.items()}
            groups = {k: list(v) for k, v in groups_committed.items()}
    view.commit()
    for doc_id in IDS:
        # the store holds, byte for byte, what encoding the whole list gives
        assert store.get_many("edges", [doc_id.encode()])[0] == _edges_bytes(edges.get(doc_id, []))
        members = groups.get(doc_id, [])
        assert store.get_many("exact", [doc_id.encode()])[0] == (dumps(members) if members else None)


def test_an_undecoded_list_is_appended_to_without_decoding_it() -> None:
    store = MemoryStore()
    first = StateView(store)
    first.put_edges("a", [("x", 0.9, False)])
    first.commit()
    view = StateView(store)
    view.add_edges("a", [("y", 0.8, False)])
    view.add_edges("a", [("z", 1.0, True)])
    assert "edges" in view._tails and b"a" in view._tails["edges"]
    assert b"a" not in view._decoded["edges"]
    view.commit()
    stored = orjson.loads(store.get_many("edges", [b"a"])[0] or b"")
    assert stored == [["x", 0.9, False], ["y", 0.8, False], ["z", 1.0, True]]


def test_a_write_of_the_whole_list_replaces_what_was_appended() -> None:
    store = MemoryStore()
    view = StateView(store)
    view.add_edges("a", [("x", 0.5, False)])
    view.put_edges("a", [("y", 0.5, False)])
    view.add_edges("a", [("z", 0.5, False)])
    view.add_to_exact_group(b"g", "x")
    view.put_new_exact_groups([b"g"], ["y"])
    view.add_to_exact_group(b"g", "z")
    view.commit()
    assert store.get_many("edges", [b"a"]) == [b'[["y",0.5,false],["z",0.5,false]]']
    assert store.get_many("exact", [b"g"]) == [b'["y","z"]']
