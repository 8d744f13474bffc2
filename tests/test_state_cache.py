"""The cache of committed values kept between batches never serves a value the store does not hold.

Each test would fail if the cache (``storage/hot.py``, used by ``StateView``) kept a staged,
discarded or half-written value, or grew past its bound.
"""

from __future__ import annotations

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stream_dedupe.config import BoilerplateConfig, DedupeParams
from stream_dedupe.core.engine import DedupeEngine
from stream_dedupe.core.records import Record, parse_document
from stream_dedupe.storage.base import WriteSet
from stream_dedupe.storage.hot import HotCache
from stream_dedupe.storage.memory import MemoryStore
from stream_dedupe.storage.state import HOT_NAMESPACES, StateView

from .golden_corpus import CONFIGS, corpus

_RAWS = corpus(500, seed=7)
_PARSED: list[Record] = [parse_document(raw, 1 << 20) for raw in _RAWS]


def _replay(params: DedupeParams, cache_entries: int, sizes: list[int]) -> tuple[list[bytes], DedupeEngine]:
    engine = DedupeEngine(params, MemoryStore())
    engine.state.resize_cache(cache_entries)
    out: list[bytes] = []
    start, turn = 0, 0
    while start < len(_PARSED):
        chunk = _PARSED[start : start + sizes[turn % len(sizes)]]
        out.extend(orjson.dumps(e) for e in engine.process(chunk))
        engine.commit()
        start, turn = start + len(chunk), turn + 1
    return out, engine


def _store_equals_cache(view: StateView) -> None:
    """Every raw entry held equals the store's value."""
    hot = view.hot
    for ns in HOT_NAMESPACES:
        for generation in (hot._young[ns], hot._old[ns]):
            keys = list(generation)
            assert [generation[k] for k in keys] == view.store.get_many(ns, keys), ns


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(sorted(CONFIGS)),
    entries=st.sampled_from([1, 2, 7, 60, 1000, 200_000]),
    sizes=st.lists(st.integers(1, 120), min_size=1, max_size=4),
)
def test_any_cache_bound_gives_the_events_of_no_cache(name: str, entries: int, sizes: list[int]) -> None:
    params = CONFIGS[name][0]
    want, _ = _replay(params, 0, sizes)
    got, engine = _replay(params, entries, sizes)
    assert got == want
    assert len(engine.state.hot) <= entries  # the bound holds
    _store_equals_cache(engine.state)


def test_the_cache_is_used_and_bounded() -> None:
    _, engine = _replay(CONFIGS["estimate"][0], 200_000, [50])
    hot = engine.state.hot
    assert hot.hits > 500 and len(hot) > 1000
    _store_equals_cache(engine.state)
    _, small = _replay(CONFIGS["estimate"][0], 100, [50])
    assert 0 < len(small.state.hot) <= 100


@pytest.mark.parametrize("name", ["exact", "estimate-no-learning"])
def test_a_discarded_batch_leaves_no_trace(name: str) -> None:
    """A batch decided then discarded (the worker's failed batch), then decided again, reads the committed values."""
    params = CONFIGS["exact"][0] if name == "exact" else DedupeParams(boilerplate=BoilerplateConfig(learn=False))
    reference = DedupeEngine(params, MemoryStore())
    reference.state.resize_cache(0)
    engine = DedupeEngine(params, MemoryStore())
    engine.state.resize_cache(200_000)
    want: list[bytes] = []
    got: list[bytes] = []
    for start in range(0, len(_PARSED), 40):
        chunk = _PARSED[start : start + 40]
        want.extend(orjson.dumps(e) for e in reference.process(chunk))
        reference.commit()
        if start % 80 == 40:  # every other batch fails once after process(): nothing of it may stay
            seq = engine.seq
            engine.process(chunk)
            engine.state.discard()
            engine.rebuild_index()  # the in-memory band tables are the engine's (rebuilt as the worker does)
            engine.seq = seq
        got.extend(orjson.dumps(e) for e in engine.process(chunk))
        engine.commit()
        _store_equals_cache(engine.state)
    assert engine.state.hot.hits > 0
    assert got == want


def test_discard_keeps_only_committed_values() -> None:
    view = StateView(MemoryStore(), cache_entries=1000)
    view.put("docs", b"a", b"1")
    view.put_edges("a", [("b", 0.9, False)])
    view.commit()
    assert view.edges("a") == [("b", 0.9, False)]
    view.put("docs", b"a", b"2")
    view.put_edges("a", [])
    view.discard()
    assert view.get("docs", b"a") == b"1"
    assert view.edges("a") == [("b", 0.9, False)]
    view.discard()
    view.put_edges("a", [("c", 1.0, True)])
    view.commit()
    assert view.edges("a") == [("c", 1.0, True)]
    assert view.store.get_many("edges", [b"a"]) == [orjson.dumps([["c", 1.0, True]])]


class _FailingStore(MemoryStore):
    """A real in-memory store whose next write applies its first namespace, then fails."""

    fail = False

    def write(self, batch: WriteSet) -> None:
        if not self.fail:
            super().write(batch)
            return
        self.fail = False
        first = next(iter(batch))
        super().write({first: batch[first]})
        raise OSError("disk full")


def test_a_failed_store_write_clears_the_cache() -> None:
    store = _FailingStore()
    view = StateView(store, cache_entries=1000)
    view.put("docs", b"a", b"1")
    view.put("exact", b"h", b"[]")
    view.commit()
    assert len(view.hot) == 2
    view.put("docs", b"a", b"2")
    view.put("exact", b"h", b'["a"]')
    store.fail = True
    with pytest.raises(OSError):
        view.commit()
    assert len(view.hot) == 0  # the store holds part of the batch: nothing cached is trusted
    view.discard()
    assert view.get("docs", b"a") == b"2"  # what the store holds (the half-applied write)
    assert view.get("exact", b"h") == b"[]"


def test_invalidate_after_writing_the_store_by_another_path() -> None:
    view = StateView(MemoryStore(), cache_entries=1000)
    view.put_doc("a", None)
    view.put("parent", b"a", b"b")
    view.commit()
    view.store.write({"parent": {b"a": b"c"}})  # e.g. a journal re-applied under a live view
    view.invalidate()
    assert view.get_parent("a") == "c"


def test_hot_cache_bound_and_generations() -> None:
    hot = HotCache(["t"], 4)
    for i in range(10):
        hot.put("t", {i: i})
        assert len(hot) <= 4
    assert hot.lookup("t", 9) == 9
    hot.put("t", {k: k for k in range(100)})  # larger than half the bound: not kept, and no older value stays
    assert len(hot) <= 4
    hot.put("t", {9: "new"})
    assert hot.lookup("t", 9) == "new"
    hot.forget("t", {9})
    assert hot.take("t", {9}) == {}
    one = HotCache(["t"], 1)
    one.put("t", {1: 1})
    one.put("t", {2: 2})
    assert len(one) == 1
    with pytest.raises(ValueError):
        HotCache(["t"], -1)


def test_the_engine_takes_the_bound_from_its_limits() -> None:
    from stream_dedupe.config import RuntimeLimits

    assert DedupeEngine(DedupeParams(), MemoryStore(), RuntimeLimits(state_cache_entries=500)).state.hot.limit == 500
    assert DedupeEngine(DedupeParams(), MemoryStore()).state.hot.limit == 0  # off by default
