"""A live worker's HTTP port serves only /metrics, /healthz and /readyz; its topics are fit for production.

Real broker, real worker subprocesses: Faust's /table/ views (which would return the stored
documents) and /router/ (the cluster's topology) are 404, as is every other path; every topic the
worker creates has the configured replicas and the configuration the worker relies on; a
replication factor above the broker count and badly configured existing topics are refused at
start with a message that says how to fix them.
"""

from __future__ import annotations

import asyncio
import urllib.request
from typing import Any

import orjson
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from stream_dedupe.storage.base import NAMESPACES
from stream_dedupe.worker.topics import topic_configs
from tests.integration.conftest import Broker, Names, consume, n_document_events, produce

FORBIDDEN = [
    "/",
    "/table/",
    "/table/state-documents/",
    "/table/state-docs/",
    "/router/",
    "/router/topics",
    "/router/state-documents/",
    "/stats/",
    "/assignment/",
    "/graph/",
    "/performance/",
    "/signal/",
    "/metrics/extra",
    "/healthz/../table/",
    "/no-such-page-7f3a",
]


def admin_call(bootstrap: str, call: Any) -> Any:
    async def main() -> Any:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            return await call(admin)
        finally:
            await admin.close()

    return asyncio.run(main())


def describe(bootstrap: str, names: list[str]) -> tuple[dict[str, dict[str, str]], dict[str, list[Any]]]:
    async def call(admin: AIOKafkaAdminClient) -> Any:
        configs = await topic_configs(admin, names)
        described = await admin.describe_topics(names)
        return configs, {t["topic"]: t["partitions"] for t in described}

    result: tuple[dict[str, dict[str, str]], dict[str, list[Any]]] = admin_call(bootstrap, call)
    return result


def test_only_metrics_health_and_ready_are_served(broker: Broker, names: Names, workers: Any) -> None:
    w = workers().start()
    w.wait_ready()
    docs = [{"id": f"secret-{i}", "text": f"internal ticket {i} " + "confidential words " * 20} for i in range(20)]
    produce(broker.bootstrap, names.input, [(d["id"].encode(), orjson.dumps(d)) for d in docs])
    consume(broker.bootstrap, names.events, until=n_document_events(len(docs)), timeout=90)
    for path in ("/metrics", "/healthz", "/readyz"):
        status, body = w.get(path)
        assert status == 200, (path, status, body[:200])
    assert b"stream_dedupe_documents_total" in w.get("/metrics")[1]
    for ns in NAMESPACES:  # the tables hold the documents: Faust's table views would serve them
        FORBIDDEN.append(f"/table/state-{ns}/secret-1/")
    served = {}
    for path in FORBIDDEN:
        status, body = w.get(path)
        if status != 404:
            served[path] = (status, body[:120])
        assert b"confidential" not in body and b"secret-1" not in body, (path, body[:200])
    assert not served, f"paths other than /metrics, /healthz, /readyz answered: {served}"
    request = urllib.request.Request(f"http://127.0.0.1:{w.web_port}/metrics", method="POST", data=b"x")
    try:
        urllib.request.urlopen(request, timeout=2)
        raise AssertionError("POST /metrics was accepted")
    except urllib.error.HTTPError as exc:
        assert exc.code == 405
    assert w.get("/healthz")[0] == 200, "the worker stopped answering after the probes"


def test_every_topic_has_the_replicas_and_configuration_the_worker_needs(
    broker: Broker, names: Names, workers: Any
) -> None:
    w = workers().start()
    w.wait_ready()
    changelogs = [f"{names.app_id}-state-{ns}-changelog" for ns in NAMESPACES]
    index = f"{names.app_id}-index"
    topics = [names.input, names.events, names.deduped, names.dlq, index, *changelogs]
    configs, partitions = describe(broker.bootstrap, topics)
    for topic in topics:
        assert topic in partitions, f"{topic} was not created"
        assert all(len(p["replicas"]) == 1 for p in partitions[topic]), topic  # --replication-factor 1 (conftest)
        assert configs[topic]["min.insync.replicas"] == "1", topic
    deduped = configs[names.deduped]
    assert deduped["cleanup.policy"] == "compact"
    assert deduped["delete.retention.ms"] == str(7 * 86_400_000)
    assert deduped["min.compaction.lag.ms"] == "3600000"
    assert int(deduped["max.message.bytes"]) >= (1 << 20) + (64 << 10)
    assert configs[index]["retention.ms"] == str(7 * 86_400_000) and configs[index]["retention.bytes"] == "-1"
    assert int(configs[names.dlq]["max.message.bytes"]) >= 2 << 20
    for changelog in changelogs:
        assert configs[changelog]["cleanup.policy"] == "compact", changelog
        assert len(partitions[changelog]) == 1
    assert "keeps records only" not in w.log() and "min.insync.replicas=" not in w.log()


def test_default_replication_factor_is_refused_on_a_single_broker(names: Names, workers: Any) -> None:
    w = workers()
    w.env = {"STREAM_DEDUPE_REPLICATION_FACTOR": ""}  # unset: the production default, 3
    w.start()
    assert w.proc is not None and w.proc.wait(90) == 2, w.log()[-2000:]
    log = w.log()
    assert "the Kafka cluster has 1 broker but stream-dedupe creates its topics with 3 replicas" in log, log[-2000:]
    assert "--replication-factor 1" in log and "STREAM_DEDUPE_REPLICATION_FACTOR=1" in log


def _precreate(bootstrap: str, topic: str, config: dict[str, str], partitions: int = 1) -> None:
    async def call(admin: AIOKafkaAdminClient) -> None:
        await admin.create_topics([NewTopic(topic, partitions, replication_factor=1, topic_configs=config)])

    admin_call(bootstrap, call)


def test_badly_configured_existing_topics_are_refused_with_the_fix(broker: Broker, workers: Any) -> None:
    cases = [
        ("deduped", {"cleanup.policy": "delete"}, ["cleanup.policy=delete", "--add-config cleanup.policy=compact"]),
        ("index", {"retention.ms": "60000"}, ["keeps records 60000 ms", "never decided", "retention.ms=604800000"]),
        ("deduped", {"cleanup.policy": "compact", "max.message.bytes": "100000"}, ["max.message.bytes=100000, below"]),
        ("changelog", {"cleanup.policy": "compact,delete"}, ["would lose state", "cleanup.policy=compact"]),
    ]
    for i, (role, config, expected) in enumerate(cases):
        names = Names(f"bad{i}{role[:3]}{id(cases) % 10_000}")
        topic = {
            "deduped": names.deduped,
            "index": f"{names.app_id}-index",
            "changelog": f"{names.app_id}-state-docs-changelog",
        }[role]
        _precreate(broker.bootstrap, topic, config)
        w = workers(app=names, log_name=f"bad{i}").start()
        assert w.proc is not None and w.proc.wait(90) == 2, w.log()[-2000:]
        log = w.log()
        assert f"topic {topic!r}" in log and "kafka-configs.sh" in log, log[-2000:]
        for text in expected:
            assert text in log, (text, log[-2000:])


def test_risky_existing_topics_start_with_a_warning_that_explains(broker: Broker, names: Names, workers: Any) -> None:
    _precreate(broker.bootstrap, f"{names.app_id}-index", {"retention.ms": str(2 * 86_400_000)})
    _precreate(broker.bootstrap, names.deduped, {"cleanup.policy": "compact", "delete.retention.ms": "3600000"}, 3)
    w = workers().start()
    w.wait_ready()
    log = w.log()
    assert f"topic '{names.app_id}-index' keeps records only 48.0 h" in log and "never decided" in log
    assert f"topic '{names.deduped}' keeps tombstones 1 h after compaction" in log and "misses deletions" in log
    # the broker's default max.message.bytes (1 MiB + 12) is below max_doc_bytes + headers: a warning
    assert f"topic '{names.deduped}' has max.message.bytes=1048588: records of documents near" in log


def test_readyz_is_503_from_the_stop_signal_on(broker: Broker, names: Names, workers: Any, tmp_path: Any) -> None:
    """Kubernetes takes a stopping pod out of its endpoints only when its readiness fails: at once.

    A worker that only signed answered 200 for ~0.3 s after SIGTERM (Faust stops its parts one by one).
    """
    import signal
    import time

    decider = workers(state_dir=tmp_path / "a").start()
    decider.wait_ready()
    signer = workers(state_dir=tmp_path / "b").start()
    signer.wait_ready()
    deadline = time.monotonic() + 60
    while orjson.loads(signer.get("/readyz")[1])["role"] != "sign" or signer.get("/readyz")[0] != 200:
        assert time.monotonic() < deadline, "the second worker never became a ready signer"
        time.sleep(0.2)
    for w in (signer, decider):
        assert w.get("/readyz")[0] == 200
        assert w.proc is not None
        w.proc.send_signal(signal.SIGTERM)
        time.sleep(0.05)  # the signal reaches the event loop
        answers = []
        while w.proc.poll() is None:
            try:
                status, body = w.get("/readyz", 1.0)
            except OSError:  # the port closed: the process is on its way out
                break
            answers.append(status)
            if status == 503:
                assert orjson.loads(body)["stopping"] is True
            time.sleep(0.02)
        # (the event loop may be busy closing tables until the port closes: no answer at all then)
        assert 200 not in answers, answers
        assert w.proc.wait(40) == 0


def test_broker_gauge_stays_connected_through_the_start(broker: Broker, names: Names, workers: Any) -> None:
    """Once the broker is reached, broker_connected never reads 0 while it stays up (it did for ~2 s).

    The start-up server, then the app's web server, answer /metrics from the process start; an alert
    or a dashboard reading a 0 there would report an outage that did not happen.
    """
    import re
    import time

    w = workers().start()
    seen: list[int] = []
    deadline = time.monotonic() + 60
    ready_at: float | None = None
    while ready_at is None or time.monotonic() < ready_at + 3:
        assert time.monotonic() < deadline, f"not ready: {w.log()[-2000:]}"
        try:
            status, body = w.get("/metrics", 1.0)
            match = re.search(rb"^stream_dedupe_broker_connected (\S+)$", body, re.MULTILINE)
            if status == 200 and match:
                seen.append(int(float(match.group(1))))
            if ready_at is None and w.get("/readyz", 1.0)[0] == 200:
                ready_at = time.monotonic()
        except OSError:  # the start-up server hands the port over to the app's
            pass
        time.sleep(0.05)
    assert 1 in seen, seen
    after_contact = seen[seen.index(1) :]
    assert 0 not in after_contact, seen
