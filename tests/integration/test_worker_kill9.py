"""SIGTERM and kill -9 mid-stream, restart: every input decided once (duplicates identical), same result."""

from __future__ import annotations

import gzip
import shutil
import time
from typing import Any

import orjson

from stream_dedupe.config import BoilerplateConfig, DedupeParams
from stream_dedupe.core.engine import DedupeEngine
from stream_dedupe.core.records import parse_document
from stream_dedupe.exports import iter_canonical_documents
from stream_dedupe.storage.memory import MemoryStore
from tests.conftest import NEWSGROUPS, shared_file
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


def test_kill_9_and_a_lost_disk_while_learning_real_text_lose_nothing(
    broker: Broker, names: Names, workers: Any
) -> None:
    """Mail with learning that bites (lines learned at 5 documents, their carriers decided again,
    counts in the redo journal): a kill -9, then a kill -9 that also loses the state directory
    (rebuilt from the changelogs). Every post is decided once and as the embedded engine decides
    it in the same order; the clusters and every line count are the engine's."""
    with gzip.open(shared_file(NEWSGROUPS)) as fh:
        raws = [line for line in fh.read().splitlines() if line.strip()][:1500]
    w = workers(extra=["--batch-size", "50", "--boilerplate-min-docs", "5"], log_name="a")
    w.start()
    w.wait_ready()
    produce(broker.bootstrap, names.input, [(orjson.loads(d)["id"].encode(), d) for d in raws])
    for target, lose_disk in ((400, False), (900, True)):
        consume(broker.bootstrap, names.events, until=n_document_events(target), timeout=120, idle=0)
        w.kill9()
        if lose_disk:
            shutil.rmtree(w.state_dir)
        time.sleep(0.5)
        w.start()
        w.wait_ready(120)
    msgs = consume(broker.bootstrap, names.events, until=n_document_events(len(raws)), timeout=180)
    assert w.stop() == 0
    events = assert_one_decision_per_input(msgs, len(raws))

    store = MemoryStore()
    engine = DedupeEngine(DedupeParams(boilerplate=BoilerplateConfig(min_docs=5)), store)
    order = decision_order(events, {orjson.loads(d)["id"]: d for d in raws})
    expected = []
    for i in range(0, len(order), 50):
        expected.extend(engine.process([parse_document(raw, 1 << 20) for raw in order[i : i + 50]]))
        engine.commit()
    assert engine.counters["resigned"] > 300 and len(engine.boilerplate.learned) > 100  # learning bites (687, 349)
    decisions = ("new", "duplicate-of", "unchanged")
    # per document the same decision (the cluster and cover events of carriers come at the end of
    # the batch in which their line was learned, and a restart moves the batches' boundaries)
    assert [e for e in events if e["event"] in decisions] == [
        {**e, "seq": got["seq"]}
        for e, got in zip(
            [e for e in expected if e["event"] in decisions],
            [e for e in events if e["event"] in decisions],
            strict=True,
        )
    ]
    state = worker_state(w.state_dir)
    assert cluster_sets(state) == cluster_sets(store)
    assert dict(state.items("boilerplate")) == dict(store.items("boilerplate"))
