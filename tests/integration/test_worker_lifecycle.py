"""Issue 7's invariant on the real broker: after inserts, re-crawls and deletes (tombstones and
``"deleted": true``), the worker's clusters and the compacted canonical topic equal a from-scratch
run over the surviving documents."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import orjson

from stream_dedupe.config import DedupeParams
from stream_dedupe.core.engine import DedupeEngine
from stream_dedupe.core.records import parse_document
from stream_dedupe.exports import iter_canonical_documents
from stream_dedupe.storage.memory import MemoryStore
from tests.integration.conftest import (
    Broker,
    Names,
    cluster_sets,
    consume,
    n_document_events,
    produce,
    replay_compacted,
    worker_state,
)

VOCAB = [f"w{i}" for i in range(2000)]


def operations(seed: int, count: int) -> tuple[list[tuple[bytes, bytes | None]], dict[str, bytes]]:
    """Records to produce (key, value or None) and the surviving documents (id -> JSON)."""
    rng = random.Random(seed)
    bases = [[rng.choice(VOCAB) for _ in range(60)] for _ in range(6)]
    records: list[tuple[bytes, bytes | None]] = []
    alive: dict[str, bytes] = {}
    for _ in range(count):
        doc_id = f"doc{rng.randrange(40):02d}"
        roll = rng.random()
        if roll < 0.1:
            records.append((doc_id.encode(), None))  # Kafka tombstone
            alive.pop(doc_id, None)
        elif roll < 0.15:
            records.append((doc_id.encode(), orjson.dumps({"id": doc_id, "deleted": True})))
            alive.pop(doc_id, None)
        else:
            words = bases[rng.randrange(len(bases))][: rng.randint(52, 60)]
            raw = orjson.dumps({"id": doc_id, "text": " ".join(words) + f" tail{rng.randrange(4)}"})
            records.append((doc_id.encode(), raw))
            alive[doc_id] = raw
    return records, alive


def test_inserts_updates_deletes_equal_a_from_scratch_run(broker: Broker, names: Names, workers: Any) -> None:
    records, alive = operations(seed=7, count=400)
    produce(broker.bootstrap, names.input, records)
    w = workers().start()
    w.wait_ready()
    consume(broker.bootstrap, names.events, until=n_document_events(len(records)), timeout=120)
    assert w.stop() == 0

    scratch = MemoryStore()
    engine = DedupeEngine(DedupeParams(), scratch)
    engine.process([parse_document(raw, 1 << 20) for _, raw in sorted(alive.items())])
    engine.commit()

    assert cluster_sets(worker_state(Path(w.state_dir))) == cluster_sets(scratch)
    deduped = replay_compacted(consume(broker.bootstrap, names.deduped))
    assert set(deduped.values()) == set(iter_canonical_documents(scratch))
