"""Learned boilerplate in the worker: counted in changelogged tables, stripped, and observable."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson

from bench.synth import footer_corpus
from stream_dedupe.core.boilerplate import learned_lines
from stream_dedupe.storage.state import StateView
from tests.integration.conftest import (
    Broker,
    Names,
    consume,
    document_events,
    n_document_events,
    produce,
    worker_state,
)


def test_worker_learns_and_strips_a_shared_footer(broker: Broker, names: Names, workers: Any) -> None:
    docs = list(footer_corpus(120, seed=4))
    produce(broker.bootstrap, names.input, [(str(d["id"]).encode(), orjson.dumps(d)) for d in docs])
    w = workers(extra=["--boilerplate-min-docs", "10"]).start()
    w.wait_ready()
    msgs = consume(broker.bootstrap, names.events, until=n_document_events(len(docs)), timeout=120)
    status, body = w.get("/metrics")
    assert status == 200
    stripped = re.search(rb"^stream_dedupe_boilerplate_lines_stripped_total (\S+)$", body, re.MULTILINE)
    assert stripped is not None and float(stripped.group(1)) >= (120 - 10) * 10  # 10 footer lines per document

    # The same pages crawled again: the sign stage of the deciding worker finds them unchanged in
    # the decider's committed records and forwards them unsigned; the decide stage recognizes
    # them without signing either (the state was committed: consume drained 1.5 s past the events).
    before = _samples(body)
    produce(broker.bootstrap, names.input, [(str(d["id"]).encode(), orjson.dumps(d)) for d in docs])
    again = consume(broker.bootstrap, names.events, until=n_document_events(2 * len(docs)), timeout=120)
    last = max(m.json()["seq"] for m in msgs)
    second = sorted((e for e in document_events(again) if e["seq"] > last), key=lambda e: e["seq"])
    assert [e["event"] for e in second] == ["unchanged"] * len(docs)
    after = _samples(w.get("/metrics")[1])
    assert after["stream_dedupe_unsigned_recrawls_total"] == len(docs)
    assert after["stream_dedupe_recrawls_recognized_total"] - before["stream_dedupe_recrawls_recognized_total"] == len(
        docs
    )
    decide = 'stream_dedupe_signed_documents_total{stage="decide"}'
    assert after[decide] == before[decide]  # none of them signed by the decide stage
    assert w.stop() == 0

    family = {str(d["id"]): d["family"] for d in docs}
    false_pairs = [
        m.json()
        for m in msgs
        if m.json()["event"] == "duplicate-of" and family[m.json()["id"]] != family[m.json()["of"]]
    ]
    # only documents read before the footer was learned (10 carriers) can be false duplicates
    assert len({e["id"] for e in false_pairs}) <= 9
    lines = list(learned_lines(StateView(worker_state(Path(w.state_dir))), 10))
    assert len(lines) == 10 and {source for source, _, _ in lines} == {"portal"}


def _samples(body: bytes) -> dict[str, float]:
    """Every sample of a /metrics page by its name and labels as printed."""
    out = {}
    for line in body.decode().splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out
