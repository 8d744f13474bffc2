"""SIGTERM and kill -9 mid-stream, restart: every input decided once (duplicates identical), same result."""

from __future__ import annotations

import time
from typing import Any

import orjson

from stream_dedupe.exports import iter_canonical_documents
from tests.integration.conftest import (
    Broker,
    Names,
    cluster_sets,
    consume,
    n_document_events,
    oracle,
    produce,
    replay_compacted,
    worker_state,
)
from tests.integration.test_worker_e2e import assert_one_decision_per_input, decision_order, synth_docs

N = 3000


def test_interrupted_mid_stream_then_restarted(broker: Broker, names: Names, workers: Any) -> None:
    docs = synth_docs(N, seed=5)
    w = workers(extra=["--batch-size", "50"], log_name="a")
    w.start()
    w.wait_ready()
    produce(broker.bootstrap, names.input, [(orjson.loads(d)["id"].encode(), d) for d in docs])

    # a graceful stop, then a kill -9, each mid-stream; the state dir is kept
    for target, how in ((600, "sigterm"), (1600, "kill9")):
        consume(broker.bootstrap, names.events, until=n_document_events(target), timeout=90, idle=0)
        if how == "kill9":
            w.kill9()
        else:
            assert w.stop() == 0
        time.sleep(0.5)
        w.start()
        w.wait_ready()
    msgs = consume(broker.bootstrap, names.events, until=n_document_events(N), timeout=180)
    assert w.stop() == 0
    events = assert_one_decision_per_input(msgs, N)

    raw_by_id = {orjson.loads(d)["id"]: d for d in docs}
    expected_store, expected_events = oracle(decision_order(events, raw_by_id))
    assert events == expected_events
    assert cluster_sets(worker_state(w.state_dir)) == cluster_sets(expected_store)
    deduped = replay_compacted(consume(broker.bootstrap, names.deduped))
    assert set(deduped.values()) == set(iter_canonical_documents(expected_store))
    duplicates = len(msgs) - len({m.headers["sd-origin"] + m.value for m in msgs if m.value})
    print(f"identical duplicate events after SIGTERM + kill -9: {duplicates}")
