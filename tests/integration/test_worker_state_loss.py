"""Local state deleted: rebuilt from the changelog topics; later documents still deduped against earlier ones."""

from __future__ import annotations

import shutil
from typing import Any

import orjson

from tests.integration.conftest import (
    Broker,
    Names,
    cluster_sets,
    consume,
    n_document_events,
    oracle,
    produce,
    worker_state,
)
from tests.integration.test_worker_e2e import assert_one_decision_per_input, decision_order, synth_docs


def test_state_dir_deleted_is_rebuilt_from_changelogs(broker: Broker, names: Names, workers: Any) -> None:
    docs = synth_docs(2000, seed=21)
    first, second = docs[:1200], docs[1200:]
    keyed = [(orjson.loads(d)["id"].encode(), d) for d in docs]
    produce(broker.bootstrap, names.input, keyed[:1200])
    w = workers(log_name="a").start()
    w.wait_ready()
    consume(broker.bootstrap, names.events, until=n_document_events(len(first)), timeout=90, idle=0.5)
    assert w.stop() == 0
    shutil.rmtree(w.state_dir)

    produce(broker.bootstrap, names.input, keyed[1200:])
    w2 = workers(log_name="b").start()
    w2.wait_ready()
    msgs = consume(broker.bootstrap, names.events, until=n_document_events(len(docs)), timeout=120)
    assert w2.stop() == 0
    assert "engine ready: 1200 documents in state" in w2.log()
    events = assert_one_decision_per_input(msgs, len(docs))

    # the documents of the second part found their duplicates among the first part
    first_ids = {orjson.loads(d)["id"] for d in first}
    second_ids = {orjson.loads(d)["id"] for d in second}
    # (a later copy is covered by a first-part document, or, ranking first, covers it: cover-changed)
    cross = {e["id"] for e in events if e["event"] == "duplicate-of" and e["id"] in second_ids and e["of"] in first_ids}
    for m in msgs:
        e = m.json()
        if e["event"] == "cover-changed" and e["id"] in second_ids and any(x["id"] in first_ids for x in e["left"]):
            cross.add(e["id"])
    assert len(cross) > 100

    raw_by_id = {orjson.loads(d)["id"]: d for d in docs}
    expected_store, expected_events = oracle(decision_order(events, raw_by_id))
    assert events == expected_events
    assert cluster_sets(worker_state(w2.state_dir)) == cluster_sets(expected_store)


def test_refuses_state_built_with_other_parameters(broker: Broker, names: Names, workers: Any) -> None:
    produce(broker.bootstrap, names.input, [(b"a", orjson.dumps({"id": "a", "text": "hello world"}))])
    w = workers(log_name="a").start()
    w.wait_ready()
    consume(broker.bootstrap, names.events, until=n_document_events(1), timeout=60, idle=0)
    assert w.stop() == 0
    w2 = workers(extra=["--threshold", "0.5"], log_name="b").start()
    assert w2.proc is not None
    assert w2.proc.wait(90) == 2
    assert "the state was built with different parameters (threshold: state has 0.8" in w2.log()
