"""A broker outage is visible (metric, /readyz body) and logs a bounded number of lines (issue 13).

aiokafka logs every failed connection attempt; Faust installs its own log handlers when it starts,
which used to drop the worker's rate-limit filter (~93,000 lines in 16 s). The index topic is
consumed outside Faust's streams, so Faust's stream monitor must not expect acks from it.
"""

from __future__ import annotations

import json
import time
from typing import Any

import orjson

from tests.integration.conftest import Broker, Names, consume, n_document_events, produce


def doc(i: int) -> bytes:
    return orjson.dumps({"id": f"o{i}", "text": " ".join(f"word{(i * 13 + j) % 991}" for j in range(50))})


def test_outage_logs_few_lines_and_shows_in_readyz(broker: Broker, names: Names, workers: Any) -> None:
    w = workers().start()
    w.wait_ready()
    produce(broker.bootstrap, names.input, [(f"o{i}".encode(), doc(i)) for i in range(50)])
    consume(broker.bootstrap, names.events, until=n_document_events(50), timeout=60)
    status, body = w.get("/readyz")
    assert status == 200 and json.loads(body)["broker"]["connected"] is True

    lines_before = len(w.log().splitlines())
    broker.stop()
    try:
        time.sleep(16)
        status, body = w.get("/readyz")
        broker_state = json.loads(body)["broker"]
        assert broker_state["connected"] is False and broker_state["last_contact_seconds"] > 5
        metrics = w.get("/metrics")[1].decode()
        assert "stream_dedupe_broker_connected 0.0" in metrics
        outage_lines = len(w.log().splitlines()) - lines_before
    finally:
        broker.resume()
    assert outage_lines < 300, f"{outage_lines} log lines in a 16 s outage:\n" + "\n".join(w.log().splitlines()[-40:])
    # the client's retried connections are warnings that say so, not errors
    assert "[ERROR] aiokafka.client: Unable connect" not in w.log()
    assert "Unable connect" in w.log() and "(retried)" in w.log()

    produce(broker.bootstrap, names.input, [(f"o{i}".encode(), doc(i)) for i in range(50, 80)])
    consume(broker.bootstrap, names.events, until=n_document_events(80), timeout=120)
    deadline = time.monotonic() + 30
    while json.loads(w.get("/readyz")[1])["broker"]["connected"] is not True:
        assert time.monotonic() < deadline, "the broker is back but /readyz does not say so"
        time.sleep(0.5)
    assert w.proc is not None and w.proc.poll() is None
    assert w.stop() == 0


def test_a_quiet_worker_logs_lines_without_terminal_codes(broker: Broker, names: Names, workers: Any) -> None:
    """At --log-level warning a start is a few lines: no spinner codes, no routine steps as warnings."""
    w = workers(extra=["--log-level", "warning"]).start()
    w.wait_ready()
    produce(broker.bootstrap, names.input, [(f"o{i}".encode(), doc(i)) for i in range(20)])
    consume(broker.bootstrap, names.events, until=n_document_events(20), timeout=60)
    assert w.stop() == 0
    log = w.log()
    assert "\x1b[" not in log, repr(log[:400])
    for routine in ("engine ready", "checking topics", "created topics", "stopping (signal"):
        assert routine not in log, routine
    verbose = workers(extra=["--log-level", "info"], state_dir=w.state_dir).start()
    verbose.wait_ready()
    assert verbose.stop() == 0
    assert "[INFO] engine ready: 20 documents in state" in verbose.log()


def test_faust_does_not_expect_acks_from_the_index_topic(tmp_path: Any) -> None:
    from stream_dedupe.worker.app import create_app
    from stream_dedupe.worker.settings import WorkerSettings

    built = create_app(WorkerSettings(app_id="acks-check", state_dir=tmp_path / "state"))
    (agent,) = built.app.agents.values()
    assert agent.channel.get_topic_name() == "acks-check-index" and agent.channel.acks is False
