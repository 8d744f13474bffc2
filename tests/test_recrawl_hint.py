"""The sign stage's hint of unchanged re-crawls: right when the state holds them, harmless when stale."""

from __future__ import annotations

import random
from collections.abc import Sequence

import orjson
import pytest

from stream_dedupe.core.engine import DedupeEngine
from stream_dedupe.core.records import Deletion, Document, Record
from stream_dedupe.core.recrawl import current_recrawls
from stream_dedupe.core.signer import Signed
from stream_dedupe.storage.base import NAMESPACES
from stream_dedupe.storage.memory import MemoryStore
from stream_dedupe.storage.rocks import RocksStore
from tests.test_recrawl import FOOTER, WORK_COUNTERS, _learning, _run, _stream, record, words


def _docs(records: Sequence[Record]) -> list[Document]:
    return [r for r in records if isinstance(r, Document)]


def _pages(seed: int = 5, n: int = 10) -> list[Record]:
    rng = random.Random(seed)
    return [record(f"p{i}", f"{words(rng)}\n{FOOTER}", source="portal", title=f"P{i}") for i in range(n)]


@pytest.mark.parametrize("store_kind", ["memory", "rocksdb"])
def test_the_hint_names_what_the_committed_state_holds_as_it_is(store_kind: str, tmp_path: object) -> None:
    store = MemoryStore() if store_kind == "memory" else RocksStore(f"{tmp_path}/state")
    engine = DedupeEngine(_learning(), store)
    pages = _pages()
    _run(engine, pages, 4)
    _run(engine, pages, 4)  # every record current (see test_recrawl)
    docs = _docs(pages)
    assert engine.unchanged_recrawls(docs) == [True] * len(docs)
    rng = random.Random(9)
    changed = record("p0", f"{words(rng)}\n{FOOTER}", source="portal", title="P0")
    retitled = record("p1", docs[1].text, source="portal", title="other")
    moved = record("p2", docs[2].text, source="wiki", title="P2")
    unknown = record("q", docs[3].text, source="portal", title="P3")
    assert engine.unchanged_recrawls(_docs([changed, retitled, moved, unknown])) == [False] * 4
    # named twice in the lot, or deleted by it: its record is not the one it will meet
    assert engine.unchanged_recrawls([docs[4], docs[4], docs[5]]) == [False, False, True]
    assert engine.unchanged_recrawls([docs[4], docs[5]], {"p5"}) == [True, False]

    # the committed state only: a batch decided and not committed is not seen
    engine.process([changed])
    assert engine.unchanged_recrawls([docs[0]]) == [True]
    assert engine.unchanged_recrawls(_docs([changed])) == [False]
    engine.commit()
    assert engine.unchanged_recrawls([docs[0]]) == [False]
    assert engine.unchanged_recrawls(_docs([changed])) == [True]
    # lines learned for the source since: a changed re-crawl's text was not counted, its record is
    # current at its own epoch only; a text counted when first decided is current at any
    assert current_recrawls(engine.state, [docs[1], *_docs([changed])], (), lambda source: 99) == [True, False]
    store.close()


def _signatures(engine: DedupeEngine, records: Sequence[Record], skip: Sequence[bool]) -> list[Signed | None]:
    """What the sign stage forwards: a signature of each document's full text, None where hinted."""
    out: list[Signed | None] = [None] * len(records)
    rows = [i for i, r in enumerate(records) if isinstance(r, Document)]
    texts = [records[i].text for i in rows]  # type: ignore[union-attr]
    for i, signed, hinted in zip(rows, engine.signer.sign(texts), skip, strict=True):
        out[i] = None if hinted else signed
    return out


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_a_stale_hint_costs_a_signature_never_a_decision(seed: int) -> None:
    """The sign stage runs ahead: a lot is hinted before the batches in front of it are decided.

    The same stream decided with every document signed, and with the hinted ones forwarded
    unsigned (hints taken one batch early, as a sign stage ahead of the decider takes them):
    the same events, state and outcome counters.
    """
    stream = _stream(seed) * 2
    batches = [stream[i : i + 12] for i in range(0, len(stream), 12)]
    signed_all = DedupeEngine(_learning(min_docs=4), MemoryStore())
    hinted = DedupeEngine(_learning(min_docs=4), MemoryStore())
    out_all, out_hinted = [], []
    skipped = stale = 0
    hints = [False] * len(_docs(batches[0]))
    for n, batch in enumerate(batches):
        out_all += signed_all.process(batch, None, _signatures(signed_all, batch, [False] * len(hints)))
        signed_all.commit()
        out_hinted += hinted.process(batch, None, _signatures(hinted, batch, hints))
        skipped += sum(hints)
        following = batches[n + 1] if n + 1 < len(batches) else []
        deleted = {r.doc_id for r in following if isinstance(r, Deletion)}
        hints = hinted.unchanged_recrawls(_docs(following), deleted)  # before this batch is committed
        hinted.commit()
        current = hinted.unchanged_recrawls(_docs(following), deleted)
        stale += sum(1 for early, now in zip(hints, current, strict=True) if early and not now)
    assert [orjson.dumps(e) for e in out_hinted] == [orjson.dumps(e) for e in out_all]
    for namespace in NAMESPACES:
        assert dict(hinted.store.items(namespace)) == dict(signed_all.store.items(namespace)), namespace
    outcomes = {k: v for k, v in hinted.counters.items() if k not in WORK_COUNTERS | {"presigned"}}
    assert outcomes == {k: v for k, v in signed_all.counters.items() if k not in WORK_COUNTERS | {"presigned"}}
    assert skipped > 20  # the stream re-crawls: the hint saves signatures
    assert 0 < stale < skipped  # some hints went stale under the batch in front, and cost only a signature
