"""The decide path changes no decision: events byte-identical to the engine of commit 26c95c2.

The golden files were written by ``tests/golden_corpus.py`` with the per-document engine, before
the batch fast path (:mod:`stream_dedupe.core.fastpath`) existed; any speed work that alters a
decision, an event field, the event order or a counter fails here. One edit since, in the
``detail`` text of ``invalid`` events only (session 30: JSON type names, "got int" -> "got a
number", "got list" -> "got an array"), applied to the golden files by that substitution alone;
every other byte is the 26c95c2 engine's.
"""

from __future__ import annotations

import gzip

import orjson
import pytest

from stream_dedupe.config import BoilerplateConfig, DedupeParams
from stream_dedupe.core.engine import DedupeEngine
from stream_dedupe.core.records import Document, parse_document
from stream_dedupe.core.signer import Signer
from stream_dedupe.storage.memory import MemoryStore

from .golden_corpus import CONFIGS, corpus, golden_path, replay


def _first_difference(got: bytes, want: bytes) -> str:
    for number, (a, b) in enumerate(zip(got.splitlines(), want.splitlines(), strict=False), 1):
        if a != b:
            return f"line {number}:\n got  {a.decode()}\n want {b.decode()}"
    return f"lengths differ: {len(got.splitlines())} lines, golden {len(want.splitlines())}"


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_events_equal_the_golden_replay(name: str) -> None:
    params, batches = CONFIGS[name]
    want = gzip.decompress(golden_path(name).read_bytes())
    got = replay(params, batches)
    assert got == want, _first_difference(got, want)


def test_presigned_records_decide_like_the_golden_replay() -> None:
    """The worker's path (records signed by the sign stage) gives the same events, in one batch size."""
    params = DedupeParams(boilerplate=BoilerplateConfig(learn=False))
    raws = corpus()
    plain = replay(params, (100,), raws)
    engine = DedupeEngine(params, MemoryStore())
    signer = Signer(params)
    parsed = [parse_document(raw, 1 << 20) for raw in raws]
    lines = []
    for start in range(0, len(parsed), 100):
        chunk = parsed[start : start + 100]
        signed = [
            signer.decode(signer.encode(signer.sign([r.text])[0])) if isinstance(r, Document) else None for r in chunk
        ]
        origins = [{"line": start + k + 1} for k in range(len(chunk))]
        lines.extend(orjson.dumps(e) for e in engine.process(chunk, origins, signed))
        engine.commit()
    assert engine.counters["presigned"] > 1000
    assert b"\n".join(lines) == b"\n".join(plain.splitlines()[:-1])
