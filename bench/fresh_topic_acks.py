"""Broker acks of the first writes to new topics, against the same writes once the topics have had traffic.

No stream-dedupe code runs here but the worker's own producer (``start_worker_producer``: acks=all,
idempotent, zstd, 900 KB batches), which writes one ~200 KB record to each of 13 topics
(the worker writes ~13: events, deduped, DLQ and the table changelogs) and awaits every ack, 40
times, first on topics just created, then again on the same topics. It isolates the broker-side
part of a new app's slow first second (BENCHMARKS.md, "The first second of a new app").

    python bench/fresh_topic_acks.py --rounds 3                 # starts its own broker
    python bench/fresh_topic_acks.py --bootstrap 127.0.0.1:9092
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_worker import broker

TOPICS = 13
SENDS = 40
RECORD_BYTES = 200_000


async def _topics(bootstrap: str) -> list[str]:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    names = [f"fresh-{uuid.uuid4().hex[:8]}" for _ in range(TOPICS)]
    try:
        await admin.create_topics([NewTopic(n, 1, 1, topic_configs={"cleanup.policy": "compact"}) for n in names])
    finally:
        await admin.close()
    await asyncio.sleep(2.0)  # well after creation: the worker reports ready seconds after creating its topics
    return names


async def _acks(bootstrap: str, names: list[str]) -> list[float]:
    """Seconds from sending one record to each topic to the last of their acks, ``SENDS`` times."""
    import time

    from stream_dedupe.worker.produce import start_worker_producer
    from stream_dedupe.worker.settings import WorkerSettings

    producer = await start_worker_producer(WorkerSettings(broker=bootstrap), "fresh-topic-acks")
    try:
        for name in names:
            await producer.partitions_for(name)  # metadata first: only the writes are timed
        out = []
        for i in range(SENDS):
            value = os.urandom(RECORD_BYTES // 2).hex().encode()  # compresses about 2x, like the documents
            start = time.monotonic()
            futures = [await producer.send(name, value, key=b"k%d" % i) for name in names]
            await asyncio.gather(*futures)
            out.append(time.monotonic() - start)
            await asyncio.sleep(0.02)
        return out
    finally:
        await producer.stop()


def _summary(seconds: list[float]) -> dict[str, float]:
    ordered = sorted(seconds)
    return {
        "median_ms": round(1000 * ordered[len(ordered) // 2], 1),
        "max_ms": round(1000 * ordered[-1], 1),
        "over_100ms": sum(s > 0.1 for s in seconds),
    }


async def _round(bootstrap: str) -> dict[str, Any]:
    names = await _topics(bootstrap)
    fresh = await _acks(bootstrap, names)
    warm = await _acks(bootstrap, names)
    return {"new_topics": _summary(fresh), "same_topics_again": _summary(warm)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--bootstrap", default=None, help="use this broker instead of starting one")
    args = parser.parse_args()
    with broker(args.bootstrap, port=19492) as bootstrap:
        asyncio.run(_acks(bootstrap, asyncio.run(_topics(bootstrap))))  # the broker's own first writes (JIT)
        rounds = [asyncio.run(_round(bootstrap)) for _ in range(args.rounds)]
    print(json.dumps({"topics": TOPICS, "sends": SENDS, "record_bytes": RECORD_BYTES, "rounds": rounds}, indent=2))


if __name__ == "__main__":
    main()
