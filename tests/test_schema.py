"""Every event the engine emits validates against the published JSON Schema."""

from __future__ import annotations

import json
import random
from importlib import resources

import jsonschema
import pytest

from stream_dedupe.config import DedupeParams
from stream_dedupe.core.engine import DedupeEngine
from stream_dedupe.core.records import parse_document
from stream_dedupe.storage.memory import MemoryStore

from .helpers import corpus, doc, text


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(resources.files("stream_dedupe").joinpath("schema/events.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_all_event_kinds_validate(validator: jsonschema.Draft202012Validator) -> None:
    rng = random.Random(4)
    left, right = text(rng, 60), text(rng, 60)
    engine = DedupeEngine(DedupeParams(threshold=0.45, lsh_margin=0.15, verify="exact"), MemoryStore())
    records = [doc(d, t) for d, t in corpus(seed=3, families=5)]
    records += [
        doc("l", left),
        doc("r", right),
        doc("x", left + " " + right),
        doc("x", text(rng, 70)),
        doc("l", left),
        parse_document(b"{oops", 100),
        parse_document(b'{"id": "r", "deleted": true}', 100),
    ]
    events = engine.process(records, [{"file": "t", "line": i + 1} for i in range(len(records))])
    kinds = {e["event"] for e in events}
    assert kinds == {
        "new",
        "duplicate-of",
        "unchanged",
        "deleted",
        "invalid",
        "canonical-changed",
        "clusters-merged",
        "cluster-split",
        "cover-changed",
    }
    for event in events:
        validator.validate(event)


def test_schema_rejects_a_malformed_event(validator: jsonschema.Draft202012Validator) -> None:
    with pytest.raises(jsonschema.ValidationError):
        validator.validate({"event": "duplicate-of", "id": "a", "seq": 1})


def test_schema_lists_every_invalid_reason() -> None:
    from stream_dedupe.core.records import INVALID_REASONS

    schema = json.loads(resources.files("stream_dedupe").joinpath("schema/events.schema.json").read_text())
    assert schema["$defs"]["invalid"]["properties"]["reason"]["enum"] == list(INVALID_REASONS)
