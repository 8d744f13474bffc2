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
    from aiokafka.client import AIOKafkaClient

    assert AIOKafkaClient._metadata_update.__name__ == "throttled"  # every client of the worker's process


def test_a_producer_with_pending_sends_does_not_spin_while_the_broker_is_down(broker: Broker, names: Names) -> None:
    """aiokafka retried a failed metadata update at once: thousands of refused connections a second.

    A plain aiokafka producer with batches pending, in a child process, before and after the
    worker's :func:`~stream_dedupe.worker.faust_compat.throttle_metadata_retries`: the failed
    updates in 6 s of outage are counted from aiokafka's own log.
    """
    import subprocess
    import sys

    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    async def create() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(names.input + "-spin", 3, 1)])
        finally:
            await admin.close()

    import asyncio

    asyncio.run(create())
    script = f"""
import asyncio, logging, sys
from aiokafka import AIOKafkaProducer
from stream_dedupe.worker import faust_compat
if sys.argv[1] == "throttled":
    faust_compat.throttle_metadata_retries()
failed = []
class Count(logging.Handler):
    def emit(self, record):
        if "Unable to update metadata" in record.getMessage():
            failed.append(record)
logging.getLogger("aiokafka").addHandler(Count())
async def main():
    producer = AIOKafkaProducer(bootstrap_servers={broker.bootstrap!r}, acks="all", request_timeout_ms=600_000)
    await producer.start()
    await producer.send_and_wait({names.input + "-spin"!r}, b"x")

    async def load():  # sends in flight all along, as a worker's under load
        while True:
            try:
                await asyncio.wait_for(producer.send({names.input + "-spin"!r}, b"x" * 100), 0.01)
            except Exception:
                pass
            await asyncio.sleep(0.002)

    task = asyncio.create_task(load())
    await asyncio.sleep(1)
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)  # the broker is stopped now
    failed.clear()
    await asyncio.sleep(6)
    print(len(failed), flush=True)
    import os; os._exit(0)
asyncio.run(main())
"""
    counts = {}
    for mode in ("plain", "throttled"):
        child = subprocess.Popen(
            [sys.executable, "-c", script, mode], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert child.stdin is not None and child.stdout is not None
        try:
            assert child.stdout.readline().strip() == "ready"
            broker.stop()
            child.stdin.write("go\n")
            child.stdin.flush()
            counts[mode] = int(child.stdout.readline())
        finally:
            child.kill()
            broker.resume()
    # without the backoff aiokafka loops on refused connections (thousands); with it, ~1 a second
    assert counts["plain"] > 500, counts
    assert counts["throttled"] < 30, counts
