"""The worker's read-only ``POST /query`` endpoint, against a real broker and a real worker process.

Off by default (no port but the web port, and ``/query`` is not served there). Turned on with
``--query-bind`` and a token file: its answers equal those of the Python API over the same
documents (right match, same similarity) and the decision the worker then gives when the same
document is produced; queries change no topic (the changelogs' end offsets, the events, the
deduped topic) and not the state's ``seq``; a wrong token is 401, an oversize body 413, bad JSON
or fields 400; the latency histogram and the answer counters are on ``/metrics``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import socket
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, TopicPartition

from stream_dedupe import Deduper
from stream_dedupe.api_types import Decision, QueryResult
from stream_dedupe.storage.base import NAMESPACES
from stream_dedupe.worker.query_http import result_json
from tests.integration.conftest import (
    Broker,
    Names,
    consume,
    document_events,
    free_port,
    n_document_events,
    produce,
    run_cli,
)

TOKEN = "s3cret-query-token"
MAX_DOC_BYTES = 20_000


def post(port: int, body: bytes, token: str | None = TOKEN, timeout: float = 10.0) -> tuple[int, Any, dict[str, str]]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/query", data=body, method="POST")
    request.add_header("Content-Type", "application/json")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as r:
            return int(r.status), orjson.loads(r.read()), dict(r.headers)
    except urllib.error.HTTPError as exc:
        return int(exc.code), orjson.loads(exc.read() or b"null"), dict(exc.headers)


def listening_ports(pid: int) -> set[int]:
    """TCP ports the process listens on (/proc/net/tcp{,6} rows in state LISTEN owned by its sockets)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            cols = line.split()
            if cols[3] == "0A" and cols[9] in inodes:
                ports.add(int(cols[1].rsplit(":", 1)[1], 16))
    return ports


def end_offsets(bootstrap: str, topics: list[str]) -> dict[tuple[str, int], int]:
    async def main() -> dict[tuple[str, int], int]:
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
        await c.start()
        try:
            cluster = await c._client.fetch_all_metadata()  # every topic's partitions
            tps = [TopicPartition(t, p) for t in topics for p in sorted(cluster.partitions_for_topic(t) or ())]
            assert {tp.topic for tp in tps} == set(topics), "a topic is missing"
            ends = await c.end_offsets(tps)
            return {(tp.topic, tp.partition): int(v) for tp, v in ends.items()}
        finally:
            await c.stop()

    return asyncio.run(main())


def corpus(n: int) -> tuple[list[dict[str, Any]], str]:
    rng = random.Random(16)
    words = [f"w{i}" for i in range(500)]
    docs = [{"id": f"doc-{i}", "text": " ".join(rng.choice(words) for _ in range(80))} for i in range(n)]
    tokens = docs[0]["text"].split()
    copy = " ".join([*tokens[:10], "x", *tokens[11:]])  # one word changed (shorter): J ~ 0.93
    return docs, copy


def test_query_endpoint_is_off_by_default(broker: Broker, workers: Any) -> None:
    w = workers().start()
    w.wait_ready()
    assert w.proc is not None
    assert listening_ports(w.proc.pid) == {w.web_port}  # no query port
    status, body = w.get("/query")
    assert status == 404, body
    request = urllib.request.Request(f"http://127.0.0.1:{w.web_port}/query", data=b'{"text": "x"}', method="POST")
    try:
        urllib.request.urlopen(request, timeout=5)
        raise AssertionError("POST /query answered on the web port")
    except urllib.error.HTTPError as exc:
        assert exc.code == 404
    assert b"stream_dedupe_query_seconds_count 0.0" in w.get("/metrics")[1]
    assert w.stop() == 0


def test_query_answers_the_would_be_decision_and_writes_nothing(
    broker: Broker, names: Names, workers: Any, tmp_path: Path
) -> None:
    token_file = tmp_path / "query-token"
    token_file.write_text(TOKEN + "\n")
    port = free_port()
    extra = ["--query-bind", f"127.0.0.1:{port}", "--query-token-file", str(token_file)]
    extra += ["--max-doc-bytes", str(MAX_DOC_BYTES), "--query-max-docs", "5", "--query-max-inflight", "2"]
    extra += ["--query-timeout", "3"]
    w = workers(extra=extra).start()
    early = []  # before the engine is built (recovery, group join): 503, never an answer from no state
    deadline = time.monotonic() + 60
    while not early or early[-1][0] != 200:
        assert time.monotonic() < deadline, (early[-5:], w.log()[-3000:])
        with contextlib.suppress(OSError):  # the port opens once the Faust app starts
            early.append(post(port, orjson.dumps({"text": "warm"}))[:2])
        time.sleep(0.1)
    assert all(status == 503 and "retry" in body["error"] for status, body in early[:-1]), early
    w.wait_ready()
    docs, copy = corpus(30)
    produce(broker.bootstrap, names.input, [(d["id"].encode(), orjson.dumps(d)) for d in docs])
    msgs = consume(broker.bootstrap, names.events, until=n_document_events(len(docs)), timeout=90)
    assert [e["event"] for e in document_events(msgs)] == ["new"] * len(docs)
    last_seq = max(m.json()["seq"] for m in msgs)
    deadline = time.monotonic() + 30
    while post(port, orjson.dumps({"text": "warm"}))[0] != 200:  # the decider's engine is up
        assert time.monotonic() < deadline, w.log()[-3000:]
        time.sleep(0.2)

    topics = [names.events, names.deduped, names.dlq, f"{names.app_id}-index"]
    topics += [f"{names.app_id}-state-{ns}-changelog" for ns in NAMESPACES]
    before = end_offsets(broker.bootstrap, topics)
    assert before[(f"{names.app_id}-state-docs-changelog", 0)] > 0

    # The same questions to the Python API over the same documents: the expected answers.
    with Deduper.memory() as dd:
        dd.add_many(docs)
        asked = [
            {"text": copy},
            {"text": "a completely different page about something else entirely, " * 5},
            {"text": docs[3]["text"], "id": "doc-3"},
            {"text": copy, "title": "Another title"},
        ]
        expected = [result_json(r) for r in dd.query_many(asked)]

    status, dup, headers = post(port, orjson.dumps(asked[0]))
    assert status == 200, dup
    assert dup["duplicate"] and dup["decision"]["kind"] == "duplicate-of"
    assert dup["decision"]["representative"] == "doc-0" and 0.85 < dup["decision"]["similarity"] < 1.0
    assert dup["matches"][0]["id"] == "doc-0" and dup["matches"][0]["representative"] is True
    assert dup == expected[0]
    assert int(headers["X-Stream-Dedupe-Seq"]) == last_seq
    status, new, _ = post(port, orjson.dumps(asked[1]))
    assert status == 200 and new["decision"]["kind"] == "new" and new["matches"] == [] and new == expected[1]
    status, many, headers = post(port, orjson.dumps(asked))
    assert status == 200 and many == expected
    assert [a["decision"]["kind"] for a in many][:3] == ["duplicate-of", "new", "unchanged"]
    assert int(headers["X-Stream-Dedupe-Seq"]) == last_seq  # nothing decided, nothing numbered

    # Rejections, each with a message saying what to do.
    status, body, headers = post(port, orjson.dumps(asked[0]), token=None)
    assert status == 401 and "Bearer" in body["error"] and headers["WWW-Authenticate"] == "Bearer"
    assert post(port, orjson.dumps(asked[0]), token="wrong-token")[0] == 401
    status, body, _ = post(port, orjson.dumps({"text": "x" * (MAX_DOC_BYTES + 1)}))
    assert status == 413 and "max_doc_bytes" in body["error"]
    status, body, _ = post(port, b'{"text": "unterminated')
    assert status == 400 and "not JSON" in body["error"]
    status, body, _ = post(port, orjson.dumps({"body": "x"}))
    assert status == 400 and "unknown fields ['body']" in body["error"]
    status, body, _ = post(port, orjson.dumps({"text": 42}))
    assert status == 400 and "string text" in body["error"]
    status, body, _ = post(port, orjson.dumps([{"text": "x"}] * 6))
    assert status == 400 and "at most 5" in body["error"]

    stalled = [stalled_request(port) for _ in range(2)]  # both slots held by clients that stop mid-body
    status, body, _ = post(port, orjson.dumps(asked[0]))
    assert status == 503 and "query_max_inflight" in body["error"]
    for sock in stalled:  # freed after query_timeout
        with sock:
            sock.settimeout(10)
            assert sock.recv(4096).startswith(b"HTTP/1.1 408")
    assert post(port, orjson.dumps(asked[0]))[0] == 200

    time.sleep(2.0)  # anything a query had sent would be there by now
    assert end_offsets(broker.bootstrap, topics) == before  # no event, no changelog record, no output

    # The answer is the decision the worker then gives to the same document.
    status, would, _ = post(port, orjson.dumps({"id": "copy-0", "text": copy}))
    assert status == 200 and would["decision"]["kind"] == "duplicate-of"
    produce(broker.bootstrap, names.input, [(b"copy-0", orjson.dumps({"id": "copy-0", "text": copy}))])
    events = document_events(
        consume(broker.bootstrap, names.events, until=n_document_events(len(docs) + 1), timeout=90)
    )
    (event,) = [e for e in events if e["id"] == "copy-0"]
    assert event["seq"] == last_seq + 1  # the queries numbered nothing
    assert result_json(QueryResult(Decision.from_event(event), ()))["decision"] == would["decision"]

    metrics = w.get("/metrics")[1].decode()
    assert "stream_dedupe_query_seconds_count" in metrics
    (count,) = [
        float(line.split()[-1])
        for line in metrics.splitlines()
        if line.startswith("stream_dedupe_query_seconds_count ")
    ]
    assert count >= 5
    assert 'stream_dedupe_query_answers_total{decision="duplicate-of"}' in metrics
    assert 'stream_dedupe_query_rejections_total{status="401"} 2.0' in metrics
    assert 'stream_dedupe_query_rejections_total{status="413"} 1.0' in metrics
    assert 'stream_dedupe_query_rejections_total{status="400"} 4.0' in metrics
    assert 'stream_dedupe_query_rejections_total{status="408"} 2.0' in metrics
    assert f'stream_dedupe_query_rejections_total{{status="503"}} {len(early):.1f}' in metrics  # early + in-flight
    assert w.stop() == 0  # SIGTERM closes the query port with the rest
    assert "Traceback" not in w.log()


def stalled_request(port: int) -> socket.socket:
    """A connection that sends the headers and the start of the body of a query, then nothing."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    head = f"POST /query HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n"
    sock.sendall(f"{head}Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{".encode())
    time.sleep(0.3)  # the server has read the headers: the request holds its slot
    return sock


def test_only_the_deciding_worker_answers(broker: Broker, workers: Any, tmp_path: Path) -> None:
    ports = [free_port(), free_port()]
    started = []
    for i, port in enumerate(ports):
        extra = ["--query-bind", f"127.0.0.1:{port}"]
        started.append(workers(state_dir=tmp_path / f"state{i}", extra=extra).start())
    for w in started:
        w.wait_ready()
    deadline = time.monotonic() + 60
    while True:
        answers = [post(port, orjson.dumps({"text": "is this a copy"}), token=None) for port in ports]
        roles = [orjson.loads(w.get("/readyz")[1])["role"] for w in started]
        if sorted(a[0] for a in answers) == [200, 503] and sorted(roles) == ["decide", "sign"]:
            break
        assert time.monotonic() < deadline, (answers, roles)
        time.sleep(0.5)
    for (status, body, _), role in zip(answers, roles, strict=True):
        if role == "decide":
            assert status == 200 and body["decision"]["kind"] == "new"
        else:
            assert status == 503 and body["role"] == "sign" and '"role": "decide"' in body["error"]


def test_a_query_port_in_use_stops_the_worker_at_start(broker: Broker, names: Names, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        n = names
        proc = run_cli(
            *("worker", "--broker", broker.bootstrap, "--app-id", n.app_id, "--input-topic", n.input),
            *("--events-topic", n.events, "--deduped-topic", n.deduped, "--dlq-topic", n.dlq),
            *("--state-dir", str(tmp_path / "state"), "--web-port", str(free_port())),
            *("--query-bind", f"127.0.0.1:{port}"),
            timeout=90,
        )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert f"error: the query endpoint cannot listen on 127.0.0.1:{port} (Address already in use)" in proc.stderr
    assert "free the port or fix STREAM_DEDUPE_QUERY_BIND / --query-bind" in proc.stderr
