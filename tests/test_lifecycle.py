"""The lifecycle invariant: after any sequence of inserts, updates and deletes, the clusters and
the canonical set equal those of a from-scratch run over the surviving documents."""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stream_dedupe.config import DedupeParams
from stream_dedupe.core.engine import DedupeEngine
from stream_dedupe.core.records import Deletion
from stream_dedupe.exports import iter_canonical_documents, iter_clusters
from stream_dedupe.storage.memory import MemoryStore

from .helpers import VOCAB, doc

_rng = random.Random(99)
BASES = [" ".join(_rng.choice(VOCAB) for _ in range(60)) for _ in range(4)]

# An operation: (doc id, None for a delete, else (base, cut, suffix)) — variants of a few bases
# give exact duplicates, near-duplicates, bridges and unrelated documents.
operations = st.lists(
    st.tuples(
        st.integers(0, 11),
        st.one_of(st.none(), st.tuples(st.integers(0, 3), st.integers(50, 60), st.integers(0, 2))),
    ),
    min_size=1,
    max_size=40,
)


def body(base: int, cut: int, suffix: int) -> str:
    return " ".join(BASES[base].split()[:cut]) + (f" extra{suffix} words{suffix}" if suffix else "")


def snapshot(store: MemoryStore) -> tuple[list[object], list[bytes]]:
    return list(iter_clusters(store, min_size=1)), sorted(iter_canonical_documents(store))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations, st.integers(1, 7), st.sampled_from(["estimate", "exact"]))
def test_incremental_equals_from_scratch(
    ops: list[tuple[int, tuple[int, int, int] | None]], batch: int, verify: str
) -> None:
    params = DedupeParams(verify=verify)  # type: ignore[arg-type]
    store = MemoryStore()
    engine = DedupeEngine(params, store)
    alive: dict[str, str] = {}
    records: list[object] = []
    for number, spec in ops:
        doc_id = f"d{number:02d}"
        if spec is None:
            records.append(Deletion(doc_id))
            alive.pop(doc_id, None)
        else:
            text = body(*spec)
            records.append(doc(doc_id, text))
            alive[doc_id] = text
    for start in range(0, len(records), batch):
        engine.process(records[start : start + batch])  # type: ignore[arg-type]
        engine.commit()
    scratch = MemoryStore()
    fresh = DedupeEngine(params, scratch)
    fresh.process([doc(i, t) for i, t in sorted(alive.items())])
    fresh.commit()
    assert snapshot(store) == snapshot(scratch)
