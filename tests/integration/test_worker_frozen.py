"""A decider frozen past its session timeout (SIGSTOP: a long GC pause, a stalled VM) and thawed.

The group gives the index partition to another worker, which decides on. The frozen one, thawed,
must not publish or write one more batch with its out-of-date engine (at_least_once has no
transactional fencing): before this test it published events whose ``seq`` numbers the new
decider had used for other documents, decided thousands of records a second time, and wrote an
older index position into the changelog, which the next decider then restarted from.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

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
from tests.integration.test_worker_scale_out import clusters_with_canonicals, create_input, metric, role

N = 2400


@pytest.mark.parametrize("moment", ["between-batches", "mid-stream", "mid-stream-2-shards"])
def test_a_thawed_decider_that_was_replaced_writes_nothing_stale(
    broker: Broker, names: Names, workers: Any, tmp_path: Path, moment: str
) -> None:
    docs = synth_docs(N, seed=41)
    create_input(broker.bootstrap, names.input, 4)
    extra = ["--batch-size", "50", *(["--index-shards", "2"] if moment.endswith("shards") else [])]
    pair = [workers(state_dir=tmp_path / f"z{i}", log_name=f"z{i}", extra=extra) for i in range(2)]
    for w in pair:
        w.start()
    for w in pair:
        w.wait_ready(120)
    keyed = [(orjson.loads(d)["id"].encode(), d) for d in docs]
    produce(broker.bootstrap, names.input, keyed[:800])
    consume(broker.bootstrap, names.events, until=n_document_events(800), timeout=120, idle=0)
    frozen = next(w for w in pair if role(w) == "decide")
    other = next(w for w in pair if w is not frozen)
    assert frozen.proc is not None
    for w in pair:  # the heartbeats renew every worker's lease (about every second)
        assert orjson.loads(w.get("/readyz")[1])["membership_confirmed_seconds_ago"] < 3, w.log()[-2000:]
    if moment == "between-batches":
        time.sleep(2)  # its last batch's changelog acknowledged
        frozen.proc.send_signal(signal.SIGSTOP)
        produce(broker.bootstrap, names.input, keyed[800:1600])
    else:  # while it decides the next 800 (its batches of 50 follow each other; with shards, their commits)
        produce(broker.bootstrap, names.input, keyed[800:1600])
        time.sleep(0.15)
        frozen.proc.send_signal(signal.SIGSTOP)
    try:
        deadline = time.monotonic() + 90  # the session timeout (6 s), a rebalance, the tables restored
        while role(other) != "decide" or other.get("/readyz")[0] != 200:
            assert time.monotonic() < deadline, other.log()[-3000:]
            time.sleep(0.3)
        consume(broker.bootstrap, names.events, until=n_document_events(1600), timeout=120, idle=0)
    finally:
        frozen.proc.send_signal(signal.SIGCONT)
    # thawed: it finds it is no longer a confirmed member before it writes anything
    produce(broker.bootstrap, names.input, keyed[1600:])
    msgs = consume(broker.bootstrap, names.events, until=n_document_events(N), timeout=240)
    time.sleep(5)  # whatever a stale decider would still publish
    msgs = consume(broker.bootstrap, names.events, until=n_document_events(N), timeout=60)
    deciders = [w for w in pair if role(w) == "decide"]
    assert len(deciders) == 1
    decider = deciders[0]
    for w in pair:
        assert w.proc is not None and w.proc.poll() is None, w.log()[-3000:]  # neither gave up
    assert metric(decider, "stream_dedupe_decider") == 1
    for w in pair:
        assert w.stop() == 0, w.log()[-3000:]

    events = assert_one_decision_per_input(msgs, N)  # no seq reused for another event, no second decision
    raw_by_id = {orjson.loads(d)["id"]: d for d in docs}
    expected_store, expected_events = oracle(decision_order(events, raw_by_id))
    assert events == expected_events
    state = worker_state(decider.state_dir)
    assert cluster_sets(state) == cluster_sets(expected_store)
    clean_store, _ = oracle(docs)
    assert clusters_with_canonicals(state) == clusters_with_canonicals(clean_store)
    log = frozen.log()
    assert "unprocessable" not in log and "dead-lettering" not in log, log[-3000:]
