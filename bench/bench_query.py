"""Latency of the worker's read-only ``POST /query`` endpoint, idle and while the worker decides a stream.

    python bench/bench_query.py --docs 20000            # starts its own broker (tools/kafka/kafka.sh)
    python bench/bench_query.py --bootstrap 127.0.0.1:9092

1. a worker with ``--query-bind`` decides ``--docs`` synthetic documents (bench/synth.py, ~1.7 KB);
2. idle: ``--queries`` sequential single-document requests (half of them a decided document with
   one word edited, half a text of the same corpus generated with another seed), client-side
   p50/p99 (HTTP on loopback included), and the share answered ``duplicate-of`` of each half;
3. lists: requests of 100 documents (the default ``query_max_docs``), ms per request;
4. busy: the same single-document queries while another ``--docs`` documents are produced as fast
   as possible (a query waits for the batch in progress: the decide stage's lock), and that
   stream's docs/s beside the first one's.

Prints one JSON object (also written to bench/out/query.json).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import orjson

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.bench_worker import Worker, broker, free_port, produce_and_consume, synth_docs, write_result  # noqa: E402


def post(port: int, body: bytes) -> Any:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/query", data=body, method="POST")
    with urllib.request.urlopen(request, timeout=30) as r:
        return orjson.loads(r.read())


def edited(raw: bytes) -> dict[str, Any]:
    doc = orjson.loads(raw)
    words = doc["text"].split(" ")
    words[len(words) // 2] = "qq"
    return {"text": " ".join(words), "title": doc.get("title"), "source": doc.get("source")}


def timed(port: int, bodies: list[bytes]) -> tuple[list[float], list[Any]]:
    latencies, answers = [], []
    for body in bodies:
        t0 = time.perf_counter()
        answers.append(post(port, body))
        latencies.append(time.perf_counter() - t0)
    return latencies, answers


def percentiles(latencies: list[float]) -> dict[str, float]:
    ordered = sorted(latencies)
    return {
        "n": len(ordered),
        "p50_ms": round(1000 * ordered[len(ordered) // 2], 2),
        "p99_ms": round(1000 * ordered[int(len(ordered) * 0.99)], 2),
        "max_ms": round(1000 * ordered[-1], 2),
    }


async def produce(bootstrap: str, topic: str, docs: list[bytes]) -> None:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=10, max_batch_size=1 << 20)
    await producer.start()
    try:
        futures = [await producer.send(topic, raw, key=orjson.loads(raw)["id"].encode()) for raw in docs]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


def decided(metrics: str) -> float:
    """Records the worker decided (``stream_dedupe_documents_total``, every outcome)."""
    prefix = "stream_dedupe_documents_total{"
    return sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines() if line.startswith(prefix))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=20000)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--bootstrap", default=None, help="use this broker instead of starting one")
    parser.add_argument("--port", type=int, default=19392, help="port of the broker started (and port + 1)")
    args = parser.parse_args()
    result: dict[str, Any] = {"cpus": os.cpu_count(), "docs": args.docs}
    with broker(args.bootstrap, args.port) as bootstrap, tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        docs = synth_docs(args.docs, seed=1)
        qport = free_port()
        w = Worker(bootstrap, f"bq{uuid.uuid4().hex[:6]}", tmp, ["--query-bind", f"127.0.0.1:{qport}"])
        w.wait_ready()
        result["stream"] = asyncio.run(produce_and_consume(bootstrap, w.prefix, docs, None))
        half = args.queries // 2
        copies = [orjson.dumps(edited(docs[i * (len(docs) // half)])) for i in range(half)]
        fresh = [orjson.dumps({"text": orjson.loads(raw)["text"]}) for raw in synth_docs(half, seed=99)]
        bodies = [b for pair in zip(copies, fresh, strict=True) for b in pair]
        timed(qport, bodies[:50])  # warm the connection path
        latencies, answers = timed(qport, bodies)
        kinds = [a["decision"]["kind"] for a in answers]
        result["idle"] = percentiles(latencies)
        result["idle"]["edited_copies_duplicate_share"] = round(kinds[0::2].count("duplicate-of") / half, 3)
        result["idle"]["other_seed_duplicate_share"] = round(kinds[1::2].count("duplicate-of") / half, 3)
        lists = [orjson.dumps([orjson.loads(b) for b in bodies[i : i + 100]]) for i in range(0, len(bodies), 100)]
        result["lists_of_100"] = percentiles(timed(qport, lists)[0])
        more = synth_docs(args.docs, seed=2)
        prefix_stream: dict[str, Any] = {}

        def stream() -> None:
            t0 = time.monotonic()
            asyncio.run(produce(bootstrap, f"{w.prefix}.in", more))
            while decided(w.metrics()) < 2 * len(docs):
                time.sleep(0.05)
            seconds = time.monotonic() - t0
            prefix_stream.update(docs=len(more), seconds=round(seconds, 2), docs_per_s=round(len(more) / seconds))

        thread = threading.Thread(target=stream)
        thread.start()
        time.sleep(1.0)  # the stream is flowing
        busy: list[float] = []
        while thread.is_alive() and len(busy) < len(bodies):
            busy.extend(timed(qport, bodies[len(busy) % len(bodies) :][:20])[0])
        thread.join()
        result["busy"] = percentiles(busy)
        result["busy_stream"] = prefix_stream
        w.stop()
    write_result("query.json", result)


if __name__ == "__main__":
    main()
