"""Large content groups: a copy joining a group of N costs the same as one joining a group of 10.

The cover decides from the representatives among a document's neighbours (``candidates``), read
group by group through ``StateView.group_representatives`` (kept between batches for large
groups), and the state appends to a group's member list and its head's edges in place, encoding
them once a batch. Each test would fail if those shortcuts changed a decision, kept a value the
store does not hold, or let the cost of a copy grow with its group again.
"""

from __future__ import annotations

import random

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stream_dedupe.config import DedupeParams
from stream_dedupe.core.cover import StateCoverGraph
from stream_dedupe.core.engine import DedupeEngine
from stream_dedupe.core.records import Deletion, Record
from stream_dedupe.storage.memory import MemoryStore
from stream_dedupe.storage.state import DocRecord, StateView

from .helpers import VOCAB, doc

_rng = random.Random(5)
_BASES = [" ".join(_rng.choice(VOCAB) for _ in range(50)) for _ in range(3)]


class _EveryNeighbourGraph(StateCoverGraph):
    """The cover as it was defined first: decide over every neighbour, not just the representatives."""

    def candidates(self, doc_id: str) -> tuple[dict[str, float], bool]:
        return self.neighbours(doc_id), True


# An operation: (id, None for a delete, else (base, variant, source, updated)). Variant 0 is the
# base itself (exact copies pile up in one group), 1-2 cut a word or add two (near-duplicates).
_operations = st.lists(
    st.tuples(
        st.integers(0, 24),
        st.one_of(
            st.none(),
            st.tuples(st.integers(0, 2), st.sampled_from([0, 0, 0, 1, 2]), st.booleans(), st.integers(0, 3)),
        ),
    ),
    min_size=1,
    max_size=60,
)


def _records(ops: list[tuple[int, tuple[int, int, bool, int] | None]]) -> list[Record]:
    out: list[Record] = []
    for number, spec in ops:
        doc_id = f"d{number:02d}"
        if spec is None:
            out.append(Deletion(doc_id))
            continue
        base, variant, notes, updated = spec
        words = _BASES[base].split()
        text = " ".join(words[:-1] if variant == 1 else [*words, "extra", "words"] if variant == 2 else words)
        extra: dict[str, object] = {"source": "notes" if notes else "wiki"}
        if updated:
            extra["updated_at"] = f"2026-0{updated}-01T00:00:00Z"
        out.append(doc(doc_id, text, **extra))
    return out


def _run(engine: DedupeEngine, records: list[Record], batch: int, fail_every: int = 0) -> list[bytes]:
    events: list[bytes] = []
    for turn, start in enumerate(range(0, len(records), batch)):
        chunk = records[start : start + batch]
        if fail_every and turn % fail_every == 1:  # a batch that fails after process(): nothing of it may stay
            seq = engine.seq
            engine.process(chunk)
            engine.state.discard()
            engine.rebuild_index()
            engine.seq = seq
        events.extend(orjson.dumps(e) for e in engine.process(chunk))
        engine.commit()
    return events


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    _operations,
    st.integers(1, 9),
    st.sampled_from([(), (("notes", 0.97),)]),
    st.sampled_from([0, 1, 2]),
    st.sampled_from([0, 1000]),
)
def test_deciding_from_representatives_gives_the_events_of_every_neighbour(
    ops: list[tuple[int, tuple[int, int, bool, int] | None]],
    batch: int,
    thresholds: tuple[tuple[str, float], ...],
    fail_every: int,
    cache: int,
) -> None:
    params = DedupeParams(source_thresholds=thresholds)
    records = _records(ops)
    reference = DedupeEngine(params, MemoryStore())
    reference.cover = _EveryNeighbourGraph(reference.state, params)
    reference.state.groups.min_size = 1 << 30  # never kept: read member by member
    engine = DedupeEngine(params, MemoryStore())
    engine.state.groups.min_size = 1  # every group kept between batches, however small
    engine.state.resize_cache(cache)
    want = _run(reference, records, batch)
    assert _run(engine, records, batch, fail_every) == want
    assert sorted(engine.state.store.items("docs")) == sorted(reference.state.store.items("docs"))
    assert sorted(engine.state.store.items("edges")) == sorted(reference.state.store.items("edges"))
    assert sorted(engine.state.store.items("exact")) == sorted(reference.state.store.items("exact"))
    graph = engine.cover
    for key, _ in engine.state.store.items("docs"):
        doc_id = key.decode()
        reps = {m: s for m, s in graph.neighbours(doc_id).items() if graph.assignment(m) is None}
        candidates, complete = graph.candidates(doc_id)
        assert {m: s for m, s in candidates.items() if graph.assignment(m) is None} == reps, doc_id
        assert not complete or candidates == graph.neighbours(doc_id), doc_id


def _copies(first: int, count: int, text: str) -> list[Record]:
    return [doc(f"copy-{i:06d}", text) for i in range(first, first + count)]


def _record_reads(group: int) -> int:
    """Record reads of deciding 10 more copies of a page (one batch) that ``group`` copies have already."""
    engine = DedupeEngine(DedupeParams(), MemoryStore())
    text = _BASES[0]
    near = " ".join([*text.split(), "one", "more"])
    for start in range(0, group, 100):
        engine.process([*_copies(start, min(100, group - start), text), *([doc("near", near)] if start == 0 else [])])
        engine.commit()
    reads = 0
    doc_of = engine.state.doc

    def counting(doc_id: str) -> DocRecord | None:
        nonlocal reads
        reads += 1
        return doc_of(doc_id)

    engine.state.doc = counting  # type: ignore[method-assign]  # count the reads of this engine's view
    events = engine.process(_copies(group, 10, text))
    engine.commit()
    # the longer near copy is the representative that covers the whole group
    assert [(e["event"], e["of"]) for e in events] == [("duplicate-of", "near")] * 10
    return reads


def test_a_copy_costs_the_same_in_a_group_of_2000_as_in_a_group_of_20() -> None:
    small, large = _record_reads(20), _record_reads(2000)
    assert large <= small + 5, (small, large)  # before: one read per member per copy (~20,000 here)


def test_appended_lists_are_encoded_once_and_equal_replaced_ones() -> None:
    view = StateView(MemoryStore(), cache_entries=1000)
    view.add_to_exact_group(b"h", "a")
    view.add_edges("a", [("b", 0.9, False)])
    assert view.get("exact", b"h") == orjson.dumps(["a"])  # a raw read encodes what was appended
    view.add_to_exact_group(b"h", "b")
    view.add_edges("a", [("c", 1.0, True)])
    assert view.near_edges("a") == [("b", 0.9, False)]
    view.commit()
    assert view.store.get_many("exact", [b"h"]) == [orjson.dumps(["a", "b"])]
    assert view.store.get_many("edges", [b"a"]) == [orjson.dumps([["b", 0.9, False], ["c", 1.0, True]])]
    # the next batch appends to its own copy: the committed list the cache holds is not touched
    view.add_edges("a", [("d", 0.8, False)])
    view.add_to_exact_group(b"h", "c")
    assert view.near_edges("a") == [("b", 0.9, False), ("d", 0.8, False)]
    view.discard()
    assert view.edges("a") == [("b", 0.9, False), ("c", 1.0, True)]
    assert view.exact_group(b"h") == ["a", "b"]
    assert view.near_edges("a") == [("b", 0.9, False)]
    # a replacement after an append wins, and appending after it extends the replacement
    view.add_edges("a", [("e", 0.7, False)])
    view.put_edges("a", [("f", 0.95, False)])
    view.add_edges("a", [("g", 1.0, True)])
    view.commit()
    assert view.store.get_many("edges", [b"a"]) == [orjson.dumps([["f", 0.95, False], ["g", 1.0, True]])]
    assert view.edges("a") == [("f", 0.95, False), ("g", 1.0, True)]


def test_group_representatives_follow_writes_commits_and_discards() -> None:
    view = StateView(MemoryStore())
    view.groups.min_size = 1
    h = b"\x01" * 16

    def record(covered_by: str | None = None, content_hash: bytes = h) -> DocRecord:
        return DocRecord(content_hash, 10, None, 2, True, covered_by=covered_by, covered_similarity=None)

    view.put_exact_group(h, ["a", "b"])
    view.put_doc("a", record())
    view.put_doc("b", record("a"))
    assert view.group_representatives(h) == ["a"]
    view.commit()
    assert view.groups.get(h) == ["a"]
    view.put_doc("b", record())  # b becomes one too: it joins the kept list
    view.put_doc("a", record("b"))
    assert view.group_representatives(h) == ["b"]
    view.discard()  # the staged flips are gone, and so is everything kept
    assert len(view.groups) == 0
    assert view.group_representatives(h) == ["a"]
    view.put_doc("a", record(content_hash=b"\x02" * 16))  # a left the group (its text changed)
    assert view.group_representatives(h) == []
    view.put_new_exact_groups([h], ["z"])
    assert view.groups.get(h) is None
