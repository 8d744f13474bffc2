"""Broker down when the worker starts, and restarted under a running worker: it waits, logs, loses nothing.

Stops and resumes the session broker (keeping its data), so it runs last in this directory.
"""

from __future__ import annotations

import re
import time
from typing import Any

import orjson

from tests.integration.conftest import Broker, Names, consume, n_document_events, oracle, produce
from tests.integration.test_worker_e2e import assert_one_decision_per_input, decision_order, synth_docs


def _wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def test_broker_down_at_start_and_restarted_under_worker(broker: Broker, names: Names, workers: Any) -> None:
    docs = synth_docs(1500, seed=31)
    keyed = [(orjson.loads(d)["id"].encode(), d) for d in docs]
    broker.stop()
    try:
        w = workers().start()
        _wait_for(lambda: w.log().count("not reachable") >= 2, 30, "the worker to log its retries")
        assert w.proc is not None and w.proc.poll() is None
        # while it waits, its web port answers: alive, not ready, and the broker not reached for
        # seconds (StreamDedupeBrokerUnreachable can fire; the target is not just "down")
        status, body = w.get("/healthz")
        assert status == 200 and orjson.loads(body)["phase"] == "waiting for the broker"
        status, body = w.get("/readyz")
        assert status == 503 and orjson.loads(body)["broker"]["connected"] is False
        metrics = w.get("/metrics")[1].decode()
        assert "stream_dedupe_ready 0.0" in metrics and "stream_dedupe_broker_connected 0.0" in metrics
        waited = float(re.search(r"^stream_dedupe_broker_last_contact_seconds (\S+)$", metrics, re.MULTILINE)[1])  # type: ignore[index]
        assert waited > 2
    finally:
        broker.resume()
    w.wait_ready(90)
    assert "connected to Kafka broker" in w.log()
    assert orjson.loads(w.get("/healthz")[1])["status"] == "alive"  # the app's own server took the port over

    produce(broker.bootstrap, names.input, keyed[:1000])
    consume(broker.bootstrap, names.events, until=n_document_events(300), timeout=90, idle=0)
    broker.stop()  # under the running worker, mid-stream
    time.sleep(3)
    assert w.proc is not None and w.proc.poll() is None, w.log()[-3000:]
    broker.resume()
    produce(broker.bootstrap, names.input, keyed[1000:])
    msgs = consume(broker.bootstrap, names.events, until=n_document_events(len(docs)), timeout=180)
    assert w.proc.poll() is None, "the worker died during the broker outage"
    assert w.stop() == 0
    events = assert_one_decision_per_input(msgs, len(docs))
    raw_by_id = {orjson.loads(d)["id"]: d for d in docs}
    _, expected_events = oracle(decision_order(events, raw_by_id))
    assert events == expected_events
