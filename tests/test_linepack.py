"""Boilerplate lines computed in a signing process: packed, pickled, unpacked, they are the lines the engine computes.

``dedupe --jobs`` has its workers split each batch into boilerplate lines
(:func:`~stream_dedupe.core.boilerplate.text_lines`) and send them packed
(:mod:`~stream_dedupe.core.linepack`); the deciding process then takes them instead of computing
them. Nothing the engine decides may change.
"""

from __future__ import annotations

import pickle
import random

import pytest

from stream_dedupe.config import BoilerplateConfig, DedupeParams
from stream_dedupe.core import jit
from stream_dedupe.core.boilerplate import TextLines, text_lines
from stream_dedupe.core.engine import DedupeEngine
from stream_dedupe.core.linepack import pack_lines, unpack_lines
from stream_dedupe.core.records import Document, parse_line
from stream_dedupe.storage.memory import MemoryStore

from .mixed_corpus import mixed_lines
from .test_line_keys import POOL, random_text


@pytest.fixture(scope="module")
def compiled() -> None:
    jit.enable()


@pytest.mark.parametrize("seed", range(6))
def test_packed_lines_unpack_to_the_lines_they_were(compiled: None, seed: int) -> None:
    rng = random.Random(seed)
    texts = [random_text(rng, POOL, non_ascii=rng.random() < 0.3) for _ in range(rng.choice([1, 7, 60]))]
    texts += ["", "\n\n", "one\r\ntwo three four\r\n"]  # no line, blank lines only, \r\n ends
    sources = [rng.choice([None, "", "news", "w\u00e9b"]) for _ in texts]
    lines = text_lines(texts, sources, 3)
    assert any(k is None for t in lines for k in t.keys) and any(k is not None for t in lines for k in t.keys)
    again = unpack_lines(pickle.loads(pickle.dumps(pack_lines(lines), protocol=5)))
    assert again == lines
    assert all(type(t.words) is bool and all(type(e) is int for e in t.ends) for t in again)
    assert all(k is None or type(k) is bytes for t in again for k in t.keys)


def test_an_empty_batch_packs_and_unpacks() -> None:
    assert unpack_lines(pack_lines([])) == []
    assert unpack_lines(pack_lines([TextLines([], [], False)])) == [TextLines([], [], False)]


def _params() -> DedupeParams:
    return DedupeParams(boilerplate=BoilerplateConfig(learn=True, min_docs=5))


def test_the_engine_decides_the_same_with_lines_given(compiled: None) -> None:
    records = [parse_line(raw, 1 << 20) for raw in mixed_lines(seed=5, families=80)]
    computed, given = DedupeEngine(_params(), MemoryStore()), DedupeEngine(_params(), MemoryStore())
    a, b = [], []
    for start in range(0, len(records), 41):
        batch = records[start : start + 41]
        docs = [r for r in batch if isinstance(r, Document)]
        each = iter(unpack_lines(pack_lines(text_lines([d.text for d in docs], [d.source for d in docs], 3))))
        lines = [next(each) if isinstance(r, Document) else None for r in batch]
        a.extend(computed.process(batch))
        b.extend(given.process(batch, lines=lines))
        computed.commit()
        given.commit()
    assert a == b
    assert given.counters["lines_given"] == sum(isinstance(r, Document) for r in records)
    assert computed.counters["lines_given"] == 0
    assert given.counters["boilerplate_lines_stripped"] == computed.counters["boilerplate_lines_stripped"] > 0
    assert dict(given.store.items("boilerplate")) == dict(computed.store.items("boilerplate"))


def test_lines_for_some_documents_only_are_refused(compiled: None) -> None:
    engine = DedupeEngine(_params(), MemoryStore())
    records = [parse_line(raw, 1 << 20) for raw in mixed_lines(families=2)[:3]]
    docs = [r for r in records if isinstance(r, Document)]
    assert len(docs) >= 2
    one = text_lines([docs[0].text], [docs[0].source], 3)[0]
    with pytest.raises(ValueError, match="every document's lines, or none"):
        engine.process(records, lines=[one if r is docs[0] else None for r in records])
