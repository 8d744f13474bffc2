"""No record stops the stream: oversize and odd records each get exactly one outcome (issue 13).

The records are sent by an independent client (librdkafka, through confluent-kafka), as a
crawler would: one 2 MB document gzip-compressed by the producer (the broker accepts it: its
limit applies to the compressed batch), 900 KB of non-JSON, a plain document over the limit on a
topic that accepts 4 MB, a 900 KB document under the limit whose signature does not fit beside
it (forwarded unsigned, it is a document like any other), a JSON bomb, a 50,000-field metadata,
a key that disagrees with the JSON id, a document identified by its key only and a tombstone on
that key. The worker must give
each exactly one outcome, never restart, and decide the records sent after them.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import random
import time
from pathlib import Path
from typing import Any

import jsonschema
import orjson
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from confluent_kafka import Producer

from tests.integration.conftest import Broker, Names, consume, n_document_events

DLQ_SCHEMA = json.loads((Path(__file__).parents[2] / "stream_dedupe" / "schema" / "dlq.schema.json").read_text())


def doc(i: int) -> bytes:
    words = " ".join(f"word{(i * 7 + j) % 997}" for j in range(60))
    return orjson.dumps({"id": f"d{i}", "text": f"document {i} {words}"})


def create_input(bootstrap: str, names: Names) -> None:
    async def main() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            topic = NewTopic(names.input, 3, 1, topic_configs={"max.message.bytes": str(4 << 20)})
            await admin.create_topics([topic])
        finally:
            await admin.close()

    asyncio.run(main())


def send(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes | None]], compression: str) -> None:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "compression.type": compression, "message.max.bytes": 8 << 20, "acks": "all"}
    )
    errors: list[Any] = []
    for key, value in records:
        producer.produce(topic, value=value, key=key, on_delivery=lambda err, _msg: errors.append(err) if err else None)
        producer.flush(30)
    assert producer.flush(30) == 0 and not errors, errors


def test_oversize_and_odd_records_get_one_outcome_each(broker: Broker, names: Names, workers: Any) -> None:
    create_input(broker.bootstrap, names)
    w = workers().start()
    w.wait_ready()
    assert w.proc is not None
    pid = w.proc.pid
    rng = random.Random(13)
    words = [f"w{rng.randrange(50_000)}" for _ in range(400_000)]
    big_gz = orjson.dumps({"id": "big-gz", "text": " ".join(words)})  # ~2.6 MB, compresses well
    assert len(big_gz) > 2_000_000
    non_json = base64.b64encode(rng.randbytes(675_000))  # 900 KB, under max_doc_bytes, not JSON
    plain_big = orjson.dumps({"id": "big-plain", "text": " ".join(words[:200_000])})  # ~1.3 MB
    assert 1 << 20 < len(plain_big) < 4 << 20
    # under the limit, but its shingle set would make the signed forward ~1.4 MB: forwarded unsigned
    fits = orjson.dumps({"id": "big-ok", "text": " ".join(words[200_000:330_000])})
    assert 850_000 < len(fits) < 1_000_000
    bomb = b'{"id": "bomb", "text": "x", "metadata": {"a": ' + b"[" * 10_000 + b"]" * 10_000 + b"}}"
    fields = orjson.dumps({"id": "meta", "text": "x", "metadata": {f"f{i}": i for i in range(50_000)}})
    gz: list[tuple[bytes | None, bytes | None]] = [(b"big-gz", big_gz)]
    plain: list[tuple[bytes | None, bytes | None]] = [
        (None, non_json),
        (b"big-plain", plain_big),
        (b"big-ok", fits),
        (None, bomb),
        (b"meta", fields),
        (b"key-A", orjson.dumps({"id": "json-B", "text": "the key and the id disagree"})),
        (b"by-key", orjson.dumps({"text": " ".join(f"keyed{j}" for j in range(40))})),
        (b"k" * 2000, orjson.dumps({"text": "a key far over max_id_bytes"})),
    ]
    send(broker.bootstrap, names.input, gz, "gzip")
    send(broker.bootstrap, names.input, plain, "none")
    send(broker.bootstrap, names.input, [(b"by-key", None)], "none")  # a tombstone on the key deletes it
    later = [(f"d{i}".encode(), doc(i)) for i in range(20)]
    send(broker.bootstrap, names.input, later, "lz4")
    total = len(gz) + len(plain) + 1 + len(later)

    msgs = consume(broker.bootstrap, names.events, until=n_document_events(total), timeout=120)
    by_origin: dict[bytes, list[dict[str, Any]]] = {}
    for m in msgs:
        event = m.json()
        if event["event"] in ("new", "duplicate-of", "unchanged", "deleted", "invalid"):
            by_origin.setdefault(m.headers["sd-origin"], []).append(event)
    assert len(by_origin) == total
    assert all(len({json.dumps(e, sort_keys=True) for e in evs}) == 1 for evs in by_origin.values())  # one outcome
    events = [evs[0] for evs in by_origin.values()]
    invalid = {e["id"]: e for e in events if e["event"] == "invalid" and e["id"]}
    assert invalid["big-gz"]["reason"] == "too-large" and str(len(big_gz)) in invalid["big-gz"]["detail"]
    assert invalid["big-plain"]["reason"] == "too-large"
    assert invalid["bomb"]["reason"] == "too-deep"
    assert invalid["meta"]["reason"] == "metadata-too-large"
    assert invalid["key-A"]["reason"] == "key-mismatch" and "json-B" in invalid["key-A"]["detail"]
    no_id = sorted((e["reason"], e["detail"]) for e in events if e["event"] == "invalid" and not e["id"])
    assert [reason for reason, _ in no_id] == ["id-too-long", "not-json"] and "2000 bytes" in no_id[0][1]
    assert {e["id"] for e in events if e["event"] == "new"} == {"by-key", "big-ok", *(f"d{i}" for i in range(20))}
    deleted = [e for e in events if e["event"] == "deleted"]
    assert deleted == [{"event": "deleted", "id": "by-key", "known": True, "seq": deleted[0]["seq"]}]

    dlq = [m.json() for m in consume(broker.bootstrap, names.dlq, until=lambda ms: len(ms) >= 7, timeout=60)]
    assert len(dlq) == 7
    originals = {"big-gz": big_gz, "big-plain": plain_big, "bomb": bomb, "meta": fields, "key-A": None}
    for record in dlq:
        jsonschema.validate(record, DLQ_SCHEMA)
        if record["reason"] == "id-too-long":
            assert record["key"] == "k" * 513 and record["id"] is None
            continue
        original = non_json if record["reason"] == "not-json" else originals[record["id"]]
        if original is None:
            continue
        payload = base64.b64decode(record["value_b64"])
        assert record["size"] == len(original) and record["sha256"] == hashlib.sha256(original).hexdigest()
        assert original.startswith(payload) and record["truncated"] == (len(payload) < len(original))
        assert len(payload) <= 64 << 10 and record["topic"] == names.input and record["offset"] >= 0

    # the worker never restarted: same process, alive, one engine start, no stage failure
    time.sleep(1.0)
    assert w.proc.poll() is None and w.proc.pid == pid
    assert os.path.exists(f"/proc/{pid}")
    log = w.log()
    assert log.count("engine ready") == 1 and "stage failed" not in log and "Traceback" not in log
    status, body = w.get("/metrics")
    assert status == 200 and 'stream_dedupe_invalid_records_total{reason="too-large"} 2.0' in body.decode()
    assert 'stream_dedupe_signed_documents_total{stage="decide"} 1.0' in body.decode()  # big-ok, unsigned
    assert w.stop() == 0


def test_a_record_that_keeps_failing_is_dead_lettered(broker: Broker, names: Names, workers: Any) -> None:
    """The poison-record policy: a document the decide stage fails on (a test-only fault hook) is
    retried, isolated from its batch, and dead-lettered as unprocessable; the rest is decided."""
    w = workers(extra=["--poison-retries", "2"])
    w.env = {"STREAM_DEDUPE_FAULT": "poison:d7"}
    w.start()
    w.wait_ready()
    assert w.proc is not None
    pid = w.proc.pid
    records = [(f"d{i}".encode(), doc(i)) for i in range(30)]
    send(broker.bootstrap, names.input, records, "zstd")
    msgs = consume(broker.bootstrap, names.events, until=n_document_events(len(records)), timeout=120)
    by_id: dict[str, set[bytes]] = {}
    for m in msgs:
        event = m.json()
        if event["event"] in ("new", "duplicate-of", "invalid"):
            by_id.setdefault(event["id"], set()).add(m.value or b"")
    assert set(by_id) == {f"d{i}" for i in range(30)} and all(len(v) == 1 for v in by_id.values())
    poison = orjson.loads(next(iter(by_id["d7"])))
    assert poison["event"] == "invalid" and poison["reason"] == "unprocessable"
    assert "failed 2 times" in poison["detail"] and "cannot be processed" in poison["detail"]
    assert all(orjson.loads(next(iter(v)))["event"] == "new" for k, v in by_id.items() if k != "d7")
    (letter,) = [m.json() for m in consume(broker.bootstrap, names.dlq, until=lambda ms: len(ms) >= 1)]
    assert letter["reason"] == "unprocessable" and base64.b64decode(letter["value_b64"]) == doc(7)
    assert w.proc.poll() is None and w.proc.pid == pid and w.log().count("engine ready") == 1
    metrics = w.get("/metrics")[1].decode()
    assert 'stream_dedupe_invalid_records_total{reason="unprocessable"} 1.0' in metrics
    assert "stream_dedupe_poison_retries_total 0.0" not in metrics
    assert w.stop() == 0


def test_produce_sends_every_line_it_can_and_names_a_line_the_broker_refuses(
    broker: Broker, names: Names, tmp_path: Path
) -> None:
    from tests.integration.conftest import run_cli

    big = orjson.dumps({"id": "big", "text": os.urandom(1_100_000).hex()})  # 2.2 MB: over the broker's 1 MB
    huge = orjson.dumps({"id": "huge", "text": "x" * (9 << 20)})  # over the client's 8 MiB request limit
    corpus = tmp_path / "crawl.jsonl"
    corpus.write_bytes(b"\n".join([doc(1), doc(2), big, doc(3)]) + b"\n")
    sent = run_cli("produce", str(corpus), "--broker", broker.bootstrap, "--topic", names.input)
    assert sent.returncode == 1, sent.stderr
    assert "Traceback" not in sent.stderr
    text = " ".join(sent.stderr.split())
    assert "sent 3 records" in text and "; 1 refused by the broker" in text, sent.stderr
    assert "by the client" not in text and "8 MiB" not in text
    assert f"the first at {corpus}:3: MessageSizeTooLargeError" in text and "max.message.bytes" in text
    # a line over the client's own limit is not the broker's doing, and the hint says so; the first
    # refused line is the first in the file, although the client refuses its own before the broker answers
    corpus.write_bytes(b"\n".join([doc(4), big, huge]) + b"\n")
    sent = run_cli("produce", str(corpus), "--broker", broker.bootstrap, "--topic", names.input)
    assert sent.returncode == 1 and "Traceback" not in sent.stderr, sent.stderr
    text = " ".join(sent.stderr.split())
    assert "sent 1 records" in text, sent.stderr
    assert "1 refused by the broker, 1 refused by the client (over 8 MiB)" in text, sent.stderr
    assert f"the first at {corpus}:2: MessageSizeTooLargeError" in text, sent.stderr
    assert "produce sends no line over 8 MiB" in text
    msgs = consume(broker.bootstrap, names.input)
    assert sorted(m.key for m in msgs) == [b"d1", b"d2", b"d3", b"d4"]
