"""The worker's record pipeline: plain aiokafka consumers for the ``route`` and ``decide`` stages.

Records bypass Faust's per-event streams (measured: 4x the throughput): ``route`` forwards input
records in whole producer batches to the one-partition index topic, and ``decide`` takes whatever
arrived while the previous batch was decided, runs the engine, publishes and awaits the
acknowledgements, then commits the state. Faust keeps the tables, their recovery, the web server
and the consumer group that makes this worker the owner of the index partition.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any, cast

import faust
import orjson
from aiokafka.partitioner import DefaultPartitioner  # type: ignore[import-untyped]

from stream_dedupe.core.engine import DedupeEngine
from stream_dedupe.core.events import DOCUMENT_EVENTS
from stream_dedupe.core.records import Deletion, Invalid, Record, parse_document
from stream_dedupe.errors import StreamDedupeError
from stream_dedupe.worker.metrics import WorkerMetrics
from stream_dedupe.worker.settings import WorkerSettings
from stream_dedupe.worker.store import FaustTableStore, send_batches

log = logging.getLogger("stream_dedupe.worker")
_PARTITIONER = DefaultPartitioner()

INDEX_OFFSET_KEY = b"worker:index-offset"
INPUT_OFFSET_PREFIX = b"worker:input-offset:"

#: Faust 0.15 hard-codes the consumer's fetch_max_wait_ms=1500. Route and decide share one
#: consumer: a fetch parked on the (then empty) index partition delayed the next input fetch by up
#: to 1.5 s, stalling the pipeline about once a second (1,250 vs 700 docs/s measured with 20 ms).
FETCH_MAX_WAIT_MS = 20


@dataclass
class _Origin:
    topic: str
    partition: int
    offset: int
    timestamp: float | None
    key: bytes | None
    value: bytes | None

    def as_dict(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "offset": self.offset}


@dataclass
class Runtime:
    """Mutable state of one worker process (one per :func:`create_app`)."""

    settings: WorkerSettings
    metrics: WorkerMetrics
    store: FaustTableStore
    engine: DedupeEngine | None = None
    fatal: StreamDedupeError | None = None
    index_offset: int = -1
    decided: dict[tuple[str, int], int] = field(default_factory=dict)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    producer: Any = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    consumers: list[Any] = field(default_factory=list)
    route_consumer: Any = None
    partitions: dict[str, list[int]] = field(default_factory=dict)
    settling: asyncio.Future[None] | None = None
    started_at: float = field(default_factory=time.monotonic)


def pause_index(app: faust.App, rt: Runtime) -> None:
    """Stop Faust's consumer fetching the index partition (the decide task reads it itself).

    Faust resumes every assigned partition after a rebalance; the recovery timer pauses it again.
    """
    from faust.types import TP

    tp = TP(rt.settings.index_topic, 0)
    consumer = cast(Any, app.consumer)
    if tp in consumer.assignment() and tp not in consumer._paused_partitions:
        consumer.pause_partitions([tp])


def owns_index(app: faust.App, rt: Runtime) -> bool:
    """True while Faust's consumer group assigns the index partition to this worker."""
    from faust.types import TP

    return TP(rt.settings.index_topic, 0) in app.consumer.assignment()


def _new_consumer(s: WorkerSettings, name: str) -> Any:
    from aiokafka import AIOKafkaConsumer  # type: ignore[import-untyped]

    return AIOKafkaConsumer(
        bootstrap_servers=s.bootstrap,
        group_id=None,  # positions come from the state, never from committed offsets
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=FETCH_MAX_WAIT_MS,
        max_partition_fetch_bytes=8 << 20,
        fetch_max_bytes=32 << 20,
        client_id=f"{s.app_id}-{name}",
    )


def start_pipeline(app: faust.App, rt: Runtime) -> None:
    """Start the route and decide tasks (once the engine is built and the positions are known)."""
    for name, coro in (("route", _route_loop(rt)), ("decide", _decide_loop(app, rt))):
        task = asyncio.ensure_future(coro)
        task.add_done_callback(_task_done(name))
        rt.tasks.append(task)


def _task_done(name: str) -> Any:
    def done(task: asyncio.Task[None]) -> None:
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            # Nothing is lost: both stages restart from the state's positions.
            log.critical("the %s stage failed: %r; exiting", name, exc, exc_info=exc)
            logging.shutdown()
            os._exit(1)

    return done


async def stop_pipeline(rt: Runtime) -> None:
    """Cancel the stages (a batch cut short is not committed), stop their clients and the producer."""
    for task in rt.tasks:
        task.cancel()
    for task in rt.tasks:
        with contextlib.suppress(BaseException):
            await task
    rt.tasks.clear()
    if rt.settling is not None:  # the last batch's changelog (else its journal is replayed at start)
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(rt.settling, 10)
        rt.settling = None
    for client in (*rt.consumers, rt.producer):
        if client is not None:
            with contextlib.suppress(Exception):
                await client.stop()
    rt.consumers.clear()


async def _route_loop(rt: Runtime) -> None:
    """Forward every input partition to the index topic, from after the last decided offsets.

    A plain consumer (no group, no commits): a restart re-reads each input partition after its
    last decided offset, as recorded in the state; records forwarded twice are dropped by decide.
    Sends go as whole producer batches; the acks of batch k are awaited after batch k+1 is sent.
    """
    from aiokafka import TopicPartition

    s, producer = rt.settings, rt.producer
    consumer = _new_consumer(s, "route")
    rt.consumers.append(consumer)
    await consumer.start()
    partitions = await producer.partitions_for(s.input_topic)  # waits for the topic's metadata
    tps = [TopicPartition(s.input_topic, p) for p in sorted(partitions)]
    consumer.assign(tps)
    for tp in tps:
        target = rt.decided.get((tp.topic, tp.partition), -1) + 1
        consumer.seek(tp, target)
        log.info("%s[%d]: routing from offset %d (first undecided record)", tp.topic, tp.partition, target)
    rt.route_consumer = consumer
    in_flight: list[tuple[Any, int]] = []
    while True:
        fetched = await consumer.getmany(timeout_ms=1000, max_records=4 * s.batch_size)
        records: list[tuple[bytes | None, bytes | None]] = []
        headers = []
        now_ms = int(time.time() * 1000)
        for tp, messages in fetched.items():
            topic, partition = tp.topic.encode(), b"%d" % tp.partition
            for m in messages:
                ts = m.timestamp if m.timestamp and m.timestamp > 0 else now_ms
                h = [("sd-topic", topic), ("sd-partition", partition)]
                h += [("sd-offset", b"%d" % m.offset), ("sd-ts", b"%d" % ts)]
                value = m.value
                if value is None:
                    h.append(("sd-deleted", b"1"))
                    value = b""
                records.append((m.key, value))
                headers.append(h)
        if not records:
            continue
        sent = await send_batches(producer, s.index_topic, 0, records, headers)
        for future, _ in in_flight:
            await future
        in_flight = sent


async def _decide_loop(app: faust.App, rt: Runtime) -> None:
    """Read the index partition after the last decided offset and decide batch after batch.

    A batch is whatever arrived while the previous one was decided (at most ``batch_size``
    records); when nothing is waiting, the fetch returns as soon as a record arrives.
    """
    from aiokafka import TopicPartition

    s = rt.settings
    consumer = _new_consumer(s, "decide")
    rt.consumers.append(consumer)
    await consumer.start()
    tp = TopicPartition(s.index_topic, 0)
    consumer.assign([tp])
    consumer.seek(tp, rt.index_offset + 1)
    log.info("%s[0]: reading from offset %d (first undecided record)", s.index_topic, rt.index_offset + 1)
    recovery = cast(Any, app.tables).recovery
    while True:
        fetched = await consumer.getmany(tp, timeout_ms=int(1000 * s.batch_wait) or 1, max_records=s.batch_size)
        messages = fetched.get(tp)
        if not messages:
            continue
        while app.rebalancing or recovery.in_recovery or not owns_index(app, rt):
            # Faust may be re-reading the changelogs into the tables, or the group gave the index
            # partition (the single writer's role) to another worker: decide nothing meanwhile.
            await asyncio.sleep(0.05)
        await _decide_batch(rt, messages)


def _origin(m: Any) -> _Origin:
    h = dict(m.headers or ())
    if "sd-offset" in h:
        ts = int(h["sd-ts"]) / 1000.0 if "sd-ts" in h else m.timestamp / 1000.0
        return _Origin(h["sd-topic"].decode(), int(h["sd-partition"]), int(h["sd-offset"]), ts, m.key, m.value)
    ts = m.timestamp / 1000.0 if m.timestamp and m.timestamp > 0 else None
    return _Origin(m.topic, m.partition, m.offset, ts, m.key, m.value)  # not routed (written directly)


def _record(m: Any, max_bytes: int) -> Record:
    if any(k == "sd-deleted" for k, _ in (m.headers or ())):
        if not m.key:
            return Invalid("missing-id", "a tombstone (null value) needs the document id as its Kafka key")
        try:
            return Deletion(m.key.decode("utf-8"))
        except UnicodeDecodeError:
            return Invalid("invalid-utf8", "the Kafka key of a tombstone is not UTF-8: keys must be document ids")
    return parse_document(m.value or b"", max_bytes)


async def _partitions(rt: Runtime, topic: str) -> list[int]:
    parts = rt.partitions.get(topic)
    if parts is None:
        parts = rt.partitions[topic] = sorted(await rt.producer.partitions_for(topic))
    return parts


async def _publish(rt: Runtime, outputs: list[tuple[str, bytes | None, bytes | None, Any]]) -> list[Any]:
    """Send ``(topic, key, value, headers)`` records as whole producer batches, one per partition.

    Partitions are chosen as ``producer.send`` does (aiokafka's default partitioner: murmur2 of
    the key), so keys land where they always did; order is kept within each partition.
    """
    grouped: dict[tuple[str, int], tuple[list[tuple[bytes | None, bytes | None]], list[Any]]] = {}
    for topic, key, value, headers in outputs:
        parts = await _partitions(rt, topic)
        partition = _PARTITIONER(key, parts, parts)
        records, hs = grouped.setdefault((topic, partition), ([], []))
        records.append((key, value))
        hs.append(headers)
    futures: list[Any] = []
    for (topic, partition), (records, hs) in grouped.items():
        futures.extend(f for f, _ in await send_batches(rt.producer, topic, partition, records, hs))
    return futures


async def _decide_batch(rt: Runtime, messages: list[Any]) -> None:
    """Decide one batch: process, publish and await acks, then commit (see the module docstring)."""
    s, engine, store, producer = rt.settings, rt.engine, rt.store, rt.producer
    assert engine is not None and producer is not None
    records: list[Record] = []
    origins: list[_Origin] = []
    new_offsets: dict[tuple[str, int], int] = {}
    for m in messages:
        if m.offset <= rt.index_offset:
            continue
        origin = _origin(m)
        tp = (origin.topic, origin.partition)
        if origin.offset <= max(rt.decided.get(tp, -1), new_offsets.get(tp, -1)):
            continue  # decided before a restart (or forwarded twice by route)
        new_offsets[tp] = origin.offset
        records.append(_record(m, s.max_doc_bytes))
        origins.append(origin)
    last_index = messages[-1].offset
    meta: dict[bytes, bytes | None] = {INDEX_OFFSET_KEY: b"%d" % last_index}
    if records:
        decided = engine.process(records, [o.as_dict() for o in origins])
        updates = engine.canonical_updates(decided)
        outputs: list[tuple[str, bytes | None, bytes | None, Any]] = []
        i = -1
        headers: list[tuple[str, bytes]] = []
        dumps, doc_events = orjson.dumps, DOCUMENT_EVENTS
        for event in decided:
            if event["event"] in doc_events:
                i += 1
                origin = origins[i]
                headers = [("sd-origin", f"{origin.topic}/{origin.partition}/{origin.offset}".encode())]
            event_id = event.get("id")
            key = event_id.encode() if event_id else origin.key
            outputs.append((s.events_topic, key, dumps(event), headers))
            if event["event"] == "invalid":
                outputs.append((s.dlq_topic, origin.key, _dlq(event, origin), headers))
        for doc_id, raw in updates:
            outputs.append((s.deduped_topic, doc_id.encode(), raw, ()))
        for future in await _publish(rt, outputs):
            await future  # every output acknowledged before the state records the decision
        now = time.time()
        for origin in origins:
            if origin.timestamp:
                rt.metrics.latency.observe(max(now - origin.timestamp, 0.0))
        rt.metrics.record_batch(decided, engine.counters, len(records))
    for (topic, partition), offset in new_offsets.items():
        meta[INPUT_OFFSET_PREFIX + f"{topic}:{partition}".encode()] = b"%d" % offset
    if rt.settling is not None:
        await asyncio.shield(rt.settling)  # previous batch's changelog acked (never cut short by a stop)
        rt.settling = None
    engine.commit(meta)
    # The changelog acks are not on the events' critical path: the next batch is fetched,
    # processed and published meanwhile, and awaits them before its own commit.
    rt.settling = asyncio.ensure_future(store.settle(producer))
    rt.index_offset = last_index
    rt.decided.update(new_offsets)


def _dlq(event: dict[str, Any], origin: _Origin) -> bytes:
    """The DLQ record of an invalid input record: its original bytes, the reason and where it was."""
    raw = origin.value or b""
    return orjson.dumps(
        {
            "reason": event["reason"],
            "detail": event["detail"],
            "topic": origin.topic,
            "partition": origin.partition,
            "offset": origin.offset,
            "key": origin.key.decode("utf-8", "replace") if origin.key else None,
            "value_b64": base64.b64encode(raw).decode(),
        }
    )
