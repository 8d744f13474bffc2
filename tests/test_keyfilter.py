"""The absent-key filter of learned boilerplate: never "absent" for a key it holds, and no change in decisions."""

from __future__ import annotations

import numpy as np
import pytest

from bench.synth import footer_corpus
from stream_dedupe.core import keyfilter
from stream_dedupe.core.engine import DedupeEngine
from stream_dedupe.core.keyfilter import KeyFilter, as_words
from stream_dedupe.core.records import parse_document
from stream_dedupe.storage.base import KVStore
from stream_dedupe.storage.memory import MemoryStore

from .helpers import doc
from .test_boilerplate import FOOTER, body, learning


def _keys(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 2**64 - 1, size=n, dtype=np.uint64)


def test_every_added_key_stays_present_across_growth() -> None:
    known = KeyFilter()
    batches = [_keys(50_000, seed) for seed in range(6)]  # 300,000 keys: the first table grows twice
    for i, batch in enumerate(batches):
        known.add(batch)
        assert known.maybe_present(np.concatenate(batches[: i + 1])).all()
    assert len(known._tables) > 1


def test_absent_keys_are_mostly_told_absent() -> None:
    known = KeyFilter()
    known.add(_keys(200_000, 1))
    false_positives = known.maybe_present(_keys(100_000, 2)).mean()
    assert false_positives < 0.05  # ~2% at 10 bits a key (module docstring)


def test_past_its_memory_bound_it_filters_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(keyfilter, "MAX_BYTES", 1 << 20)
    known = KeyFilter()
    added = _keys(2_000_000, 3)  # would need 2.5 MB
    known.add(added[:1000])
    assert not known.maybe_present(_keys(1000, 4)).all()
    known.add(added)
    assert known.saturated and known.nbytes == 0
    assert known.maybe_present(_keys(1000, 4)).all()


def test_as_words_reads_eight_byte_keys() -> None:
    words = as_words(b"\x01" + b"\x00" * 7 + b"\xff" * 8)
    assert words.tolist() == [1, 2**64 - 1]


def test_counts_stored_by_an_earlier_process_are_read(store: KVStore) -> None:
    """A reopened state's keys are in the filter: the third carrier of a footer learns it."""
    first = DedupeEngine(learning(min_docs=3), store)
    for i in range(2):
        first.process([doc(f"p{i}", f"{body(i)}\n{FOOTER}", source="portal")])
        first.commit()
    again = DedupeEngine(learning(min_docs=3), store)
    assert again.boilerplate is not None and not again.boilerplate.learned
    again.process([doc("p2", f"{body(2)}\n{FOOTER}", source="portal")])
    again.commit()
    assert len(again.boilerplate.learned) == 2


def test_counts_written_by_an_earlier_batch_are_read(store: KVStore) -> None:
    engine = DedupeEngine(learning(min_docs=3), store)
    for i in range(3):
        engine.process([doc(f"p{i}", f"{body(i)}\n{FOOTER}", source="portal")])
        engine.commit()
    assert engine.boilerplate is not None and len(engine.boilerplate.learned) == 2


def test_the_filter_changes_no_decision() -> None:
    """Every event is the same as with every count read from the state (the filter saturated)."""
    records = [parse_document(raw, 1 << 20) for raw in _raw(list(footer_corpus(300, seed=5)))]
    outcomes = []
    for filtered in (True, False):
        engine = DedupeEngine(learning(min_docs=3), MemoryStore())
        assert engine.boilerplate is not None
        if not filtered:
            engine.boilerplate.known.saturate()
        events = []
        for start in range(0, len(records), 2):  # a line reaches min_docs over batches
            events.extend(engine.process(records[start : start + 2]))
            engine.commit()
        outcomes.append(events)
    assert outcomes[0] == outcomes[1]
    assert any(e.get("event") == "duplicate-of" for e in outcomes[0])


def _raw(docs: list[dict[str, object]]) -> list[bytes]:
    import orjson

    return [orjson.dumps(d) for d in docs]
