"""Bad records go to the DLQ (worker keeps running), metrics pass promtool, topic layout is checked."""

from __future__ import annotations

import asyncio
import base64
import re
import shutil
import subprocess
import time
from typing import Any

import orjson
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from tests.integration.conftest import Broker, Names, consume, n_document_events, produce, replay_compacted, run_cli


def doc(i: int, **extra: Any) -> bytes:
    words = " ".join(f"word{(i * 7 + j) % 997}" for j in range(60))
    return orjson.dumps({"id": f"d{i}", "text": f"document {i} {words}", **extra})


BAD = {
    "not-json": b"this is not json",
    "bad-id": b'{"id": 5, "text": "an id must be a string"}',
    "invalid-utf8": b'{"id": "u1", "text": "\xff\xfe broken"}',
    "missing-id": b'{"text": "no id at all"}',
    "too-large": orjson.dumps({"id": "big", "text": "x" * 5000}),
}


def test_bad_records_go_to_dlq_and_worker_keeps_running(broker: Broker, names: Names, workers: Any) -> None:
    w = workers(extra=["--max-doc-bytes", "4096"]).start()
    w.wait_ready()
    records: list[tuple[bytes | None, bytes | None]] = [(b"d0", doc(0)), (b"d1", doc(1))]
    records += [(None, raw) for raw in BAD.values()]
    records += [(b"d0", None)]  # tombstone: d0 is gone
    records += [(f"d{i}".encode(), doc(i)) for i in range(2, 10)]
    records += [(b"d2c", orjson.dumps({**orjson.loads(doc(2)), "id": "d2c"}))]  # exact copy of d2
    produce(broker.bootstrap, names.input, records)

    msgs = consume(broker.bootstrap, names.events, until=n_document_events(len(records)), timeout=60)
    cluster_events = ("canonical-changed", "cover-changed", "clusters-merged", "cluster-split")
    events = {(m.headers["sd-origin"]): m.json() for m in msgs if m.json()["event"] not in cluster_events}
    covers = sum(m.json()["event"] == "cover-changed" for m in msgs)
    invalid = [e for e in events.values() if e["event"] == "invalid"]
    assert sorted(e["reason"] for e in invalid) == sorted(BAD)
    for e in invalid:
        assert e["topic"] == names.input and isinstance(e["partition"], int) and isinstance(e["offset"], int)
    kinds = sorted(e["event"] for e in events.values())
    # d2c arrives before or after d2 (partitions): either it is a duplicate-of d2, or it is new
    # and d2, arriving second and ranking first, takes its place (a cover-changed event)
    assert kinds.count("new") + kinds.count("duplicate-of") == 11 and kinds.count("deleted") == 1
    assert kinds.count("duplicate-of") + covers == 1

    dlq = [m.json() for m in consume(broker.bootstrap, names.dlq, until=lambda ms: len(ms) >= len(BAD))]
    assert len(dlq) == len(BAD)
    for record in dlq:
        assert base64.b64decode(record["value_b64"]) == BAD[record["reason"]]
        assert record["topic"] == names.input and record["detail"]
        assert isinstance(record["partition"], int) and isinstance(record["offset"], int)

    # good records after the bad ones were decided, and the worker is still running
    assert w.proc is not None and w.proc.poll() is None
    deduped = replay_compacted(consume(broker.bootstrap, names.deduped))
    assert b"d0" not in deduped and b"d1" in deduped and b"d2c" not in deduped

    # metrics: invalid records by reason, outcomes; the exposition passes promtool
    time.sleep(5.5)  # one refresh of the periodic gauges
    status, body = w.get("/metrics")
    assert status == 200
    text = body.decode()
    for reason in BAD:
        assert f'stream_dedupe_invalid_records_total{{reason="{reason}"}} 1.0' in text
    # new + duplicate = the 11 documents; the split between them follows the arrival order of d2/d2c
    pattern = r'stream_dedupe_documents_total\{outcome="(new|duplicate)"\} (\S+)'
    decided = {k: float(v) for k, v in re.findall(pattern, text)}
    assert sum(decided.values()) == 11.0 and decided.get("new", 0.0) >= 10.0
    for name in (
        "stream_dedupe_duplicate_ratio",
        "stream_dedupe_candidates_per_document_bucket",
        "stream_dedupe_verification_rejections_total",
        "stream_dedupe_decision_latency_seconds_bucket",
        "stream_dedupe_clusters",
        "stream_dedupe_hot_bucket_skips_total",
        "stream_dedupe_full_bucket_candidates_total",
        "stream_dedupe_state_documents",
        "stream_dedupe_state_bytes",
        "stream_dedupe_consumer_lag",
    ):
        assert name in text, name
    assert "stream_dedupe_state_documents 10.0" in text  # 11 decided, d0 deleted
    # every input partition of the sign stage has its lag, 0 once idle: the last forwards are
    # committed without waiting for more records, and a partition that got none is exported too
    lags = dict(re.findall(rf'stream_dedupe_consumer_lag\{{partition="(\d+)",topic="{names.input}"\}} (\S+)', text))
    assert lags == {"0": "0.0", "1": "0.0", "2": "0.0"}, lags
    committed = asyncio.run(_committed(broker.bootstrap, f"{names.app_id}-sign"))
    assert sum(committed.values()) == len(consume(broker.bootstrap, names.input)), committed
    promtool = shutil.which("promtool")
    assert promtool, "promtool missing: apt-get install -y prometheus (see docs/worker.md)"
    check = subprocess.run([promtool, "check", "metrics"], input=body, capture_output=True, timeout=30, check=False)
    assert check.returncode == 0, check.stdout + check.stderr
    assert w.get("/healthz")[0] == 200 and w.get("/readyz")[0] == 200
    assert w.stop() == 0


def test_refuses_index_topic_with_several_partitions(broker: Broker, names: Names, workers: Any) -> None:
    async def create() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(f"{names.app_id}-index", num_partitions=2, replication_factor=1)])
        finally:
            await admin.close()

    asyncio.run(create())
    w = workers().start()
    assert w.proc is not None
    assert w.proc.wait(60) == 2
    log = w.log()
    assert f"topic '{names.app_id}-index' has 2 partitions" in log and "exactly 1" in log


def test_produce_reports_missing_input() -> None:
    result = run_cli("produce", "/nonexistent.jsonl", "--broker", "127.0.0.1:1")
    assert result.returncode == 2 and "does not exist" in result.stderr


async def _committed(bootstrap: str, group: str) -> dict[int, int]:
    """The offsets a consumer group committed, by partition."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(group)
    finally:
        await admin.close()
    return {tp.partition: meta.offset for tp, meta in offsets.items()}
