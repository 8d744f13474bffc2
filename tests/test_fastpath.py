"""The batch fast path decides exactly as the per-document path: same event bytes, same state.

Random streams of inserts, exact and near duplicates, re-crawls (same id, same or new text),
deletes, empty texts and ids repeated within a batch, in random batch sizes, are decided twice:
with the fast path and with every document sent through the per-document path
(``DedupeEngine.fast_path = False``). The events and every namespace of the state must be equal.
"""

from __future__ import annotations

import random

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stream_dedupe.config import BoilerplateConfig, DedupeParams
from stream_dedupe.core.engine import DedupeEngine
from stream_dedupe.core.records import Deletion, Record
from stream_dedupe.storage.base import NAMESPACES
from stream_dedupe.storage.memory import MemoryStore

from .helpers import VOCAB, doc

_rng = random.Random(15)
BASES = [" ".join(_rng.choice(VOCAB) for _ in range(50)) for _ in range(5)]
FOOTER = "shared footer line of the portal with enough words"

operations = st.lists(
    st.tuples(
        st.integers(0, 14),  # document id
        st.one_of(st.none(), st.tuples(st.integers(0, 5), st.integers(35, 50), st.integers(0, 3), st.booleans())),
    ),
    min_size=1,
    max_size=60,
)


def body(base: int, cut: int, suffix: int, footer: bool) -> str:
    if base == 5:
        return "   "  # no words: empty-text
    text = " ".join(BASES[base].split()[:cut]) + (f" tail{suffix} more{suffix}" if suffix else "")
    return f"{text}\n{FOOTER}" if footer else text


def run(params: DedupeParams, records: list[Record], sizes: list[int], fast: bool) -> tuple[list[bytes], dict]:
    store = MemoryStore()
    engine = DedupeEngine(params, store)
    engine.fast_path = fast
    events: list[bytes] = []
    start, turn = 0, 0
    while start < len(records):
        size = sizes[turn % len(sizes)]
        events.extend(orjson.dumps(e) for e in engine.process(records[start : start + size]))
        engine.commit()
        start, turn = start + size, turn + 1
    state = {ns: list(store.items(ns)) for ns in NAMESPACES}
    return events, {"state": state, "counters": dict(sorted(engine.counters.items()))}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations, st.lists(st.integers(1, 20), min_size=1, max_size=4), st.sampled_from(["estimate", "exact"]))
def test_fast_path_equals_the_per_document_path(
    ops: list[tuple[int, tuple[int, int, int, bool] | None]], sizes: list[int], verify: str
) -> None:
    params = DedupeParams(verify=verify, boilerplate=BoilerplateConfig(min_docs=4))  # type: ignore[arg-type]
    records: list[Record] = []
    for number, spec in ops:
        doc_id = f"d{number:02d}"
        if spec is None:
            records.append(Deletion(doc_id))
        else:
            records.append(doc(doc_id, body(*spec), source="portal"))  # type: ignore[arg-type]
    fast_events, fast_state = run(params, records, sizes, fast=True)
    slow_events, slow_state = run(params, records, sizes, fast=False)
    assert fast_events == slow_events
    assert fast_state == slow_state


def test_the_fast_path_takes_new_documents_and_only_those() -> None:
    """A batch of unrelated documents, then one with a copy, a re-crawl and a repeated id."""
    store = MemoryStore()
    engine = DedupeEngine(DedupeParams(), store)
    rng = random.Random(3)
    texts = [" ".join(rng.choice(VOCAB) for _ in range(80)) for _ in range(6)]
    first = engine.process([doc(f"a{i}", t) for i, t in enumerate(texts[:4])])  # type: ignore[misc]
    engine.commit()
    assert [e["event"] for e in first] == ["new"] * 4
    batch = [doc("b0", texts[4]), doc("b1", texts[0]), doc("a1", texts[5]), doc("b2", texts[4] + " x"), doc("b0", "z")]
    prepared = engine.preparer.prepare(batch, [None] * len(batch), engine.lsh)  # type: ignore[arg-type]
    from stream_dedupe.core.fastpath import classify

    # b0: new; b1: a copy of a0; a1: a re-crawl; b2: shares bands with b0 earlier in the batch; b0 again
    assert classify(batch, prepared, engine.state, engine.lsh) == [True, False, False, False, False]  # type: ignore[arg-type]
    engine.state.discard()
