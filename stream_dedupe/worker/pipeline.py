"""The decide stage: the single writer of the state, fed by every worker's sign stage.

Records bypass Faust's per-event streams (measured: 4x the throughput): the sign stages
(:mod:`stream_dedupe.worker.sign`) forward input records with their signatures to the
one-partition index topic, and ``decide`` (a plain aiokafka consumer, run only by the worker that
Faust's consumer group makes owner of the index partition) takes whatever arrived while the
previous batch was decided, runs the engine, publishes and awaits the acknowledgements, then
commits the state. A rebalance closes the decide gate: the batch in progress finishes and its
changelog is acknowledged before Faust may hand the index partition to another worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import faust
import orjson

from stream_dedupe.core.engine import DedupeEngine
from stream_dedupe.core.events import DOCUMENT_EVENTS
from stream_dedupe.core.records import Invalid, ParseLimits, Record
from stream_dedupe.core.signer import Signed
from stream_dedupe.errors import StreamDedupeError
from stream_dedupe.worker import faust_compat
from stream_dedupe.worker.decided_offsets import DecidedOffsets
from stream_dedupe.worker.faults import fault_point
from stream_dedupe.worker.index_records import Origin, origin_of, record_of, signature_of
from stream_dedupe.worker.membership import ensure_member, not_member
from stream_dedupe.worker.metrics import WorkerMetrics
from stream_dedupe.worker.outputs import fit_outputs, invalid_letter, poison_fault, short_key
from stream_dedupe.worker.poison import await_settled, decide_safely
from stream_dedupe.worker.publish import publish_outputs, publish_transaction
from stream_dedupe.worker.retention import expiry_deletions, first_run, is_expiry
from stream_dedupe.worker.settings import WorkerSettings
from stream_dedupe.worker.shard_stage import call_engine, engine_store
from stream_dedupe.worker.sign import FETCH_MAX_WAIT_MS, SignStage
from stream_dedupe.worker.sizes import TopicLimits, read_topic_limits
from stream_dedupe.worker.store import FaustTableStore

log = logging.getLogger("stream_dedupe.worker")

INDEX_OFFSET_KEY = b"worker:index-offset"
INPUT_OFFSET_PREFIX = b"worker:input-offset:"


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
    #: exactly_once: the transactional producer of the outputs (``producer`` writes the changelogs).
    txn_producer: Any = None
    #: exactly_once: index records below this offset were published by a committed transaction
    #: whose state was not committed yet: they are decided again without publishing.
    replay_until: int = -1
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    consumers: list[Any] = field(default_factory=list)
    partitions: dict[str, list[int]] = field(default_factory=dict)
    settling: asyncio.Future[None] | None = None
    started_at: float = field(default_factory=time.monotonic)
    sign: SignStage | None = None
    sign_task: asyncio.Task[None] | None = None
    #: Open while this worker may decide (it owns the index partition, no rebalance, recovered).
    gate: asyncio.Event = field(default_factory=asyncio.Event)
    #: Held while a batch is decided (a rebalance waits for it).
    deciding: asyncio.Lock = field(default_factory=asyncio.Lock)
    #: True once Faust's consumer group gave this worker its first assignment.
    assigned: bool = False
    #: The topics' ``max.message.bytes`` (read when the decide stage starts).
    sizes: TopicLimits | None = None
    #: Bounds of a valid record (``max_doc_bytes`` lowered to what the topics can carry).
    parse_limits: ParseLimits | None = None
    #: Index shards (:mod:`stream_dedupe.worker.shard_stage`): the decider's client, the shards served here.
    shard_client: Any = None
    shard_servers: dict[int, Any] = field(default_factory=dict)
    shard_producer: Any = None
    shard_standby: Any = None
    #: Rebalances that stopped the shard standby copies (a placement looked up across one is dropped).
    shard_epoch: int = 0
    #: When the shard standby placement was last looked up (monotonic s; one look-up per 2 s).
    shard_standby_tried: float = 0.0
    #: at_least_once: reports the decided position to Kafka as the decide group's offset.
    decided_offsets: DecidedOffsets | None = None
    #: Set by the first stop signal: ``/readyz`` answers 503 from then on (the pod leaves its endpoints).
    stopping: bool = False
    #: Faust's own producer (its aiokafka client connects first: the broker gauges read it too).
    app_producer: Any = None
    #: While the decide stage retries a batch that failed for no record's fault (a shard that
    #: does not answer, a broker outage): when it first failed (monotonic s) and the last error.
    decide_waiting: tuple[float, str] | None = None
    #: When the group last gave this worker its partitions (monotonic s), and how to read when the
    #: broker last accepted its heartbeat: the decider's lease (:mod:`stream_dedupe.worker.membership`).
    assigned_at: float = 0.0
    confirmed_at: Callable[[], float | None] | None = None


def pause_index(app: faust.App, rt: Runtime) -> None:
    """Stop Faust's consumer fetching the index partition (the decide task reads it itself).

    Faust resumes every assigned partition after a rebalance; the recovery timer pauses it again.
    """
    from faust.types import TP

    tp = TP(rt.settings.index_topic, 0)
    consumer = cast(Any, app.consumer)
    if tp in consumer.assignment() and not faust_compat.is_paused(consumer, tp):
        consumer.pause_partitions([tp])


def owns_index(app: faust.App, rt: Runtime) -> bool:
    """True while Faust's consumer group assigns the index partition to this worker.

    False before Faust's consumer thread has started: a worker that has not joined the group
    owns nothing (``/readyz`` polled that early answered 500 with a traceback in the log).
    """
    from faust.exceptions import ConsumerNotStarted
    from faust.types import TP

    try:
        return TP(rt.settings.index_topic, 0) in app.consumer.assignment()
    except ConsumerNotStarted:
        return False


def _new_consumer(s: WorkerSettings, name: str, group_id: str | None = None) -> Any:
    from aiokafka import AIOKafkaConsumer  # type: ignore[import-untyped]

    return AIOKafkaConsumer(
        bootstrap_servers=s.bootstrap,
        group_id=group_id,  # positions come from the state, never from committed offsets
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=FETCH_MAX_WAIT_MS,
        max_partition_fetch_bytes=8 << 20,
        fetch_max_bytes=32 << 20,
        client_id=f"{s.app_id}-{name}",
        **s.kafka_security(),
    )


def start_pipeline(app: faust.App, rt: Runtime) -> None:
    """Start the decide task (once the engine is built and the positions are known)."""
    task = asyncio.ensure_future(_decide_loop(app, rt))
    task.add_done_callback(_task_done("decide"))
    rt.tasks.append(task)


def start_sign_stage(rt: Runtime, stage: SignStage) -> None:
    """Start this worker's sign stage (independent of the index partition's ownership)."""
    rt.sign = stage
    rt.sign_task = asyncio.ensure_future(stage.run())
    rt.sign_task.add_done_callback(_task_done("sign"))


async def close_gate(rt: Runtime) -> None:
    """Stop deciding: wait for the batch in progress and its changelog acknowledgements."""
    rt.gate.clear()
    async with rt.deciding:
        if rt.settling is not None:
            await asyncio.shield(rt.settling)
            rt.settling = None


async def stop_decide(rt: Runtime) -> None:
    """Stop the decide stage and forget the engine (the index partition went to another worker)."""
    await close_gate(rt)
    await stop_pipeline(rt, keep_producer=True)
    rt.engine = None
    rt.index_offset = -1
    rt.decided.clear()


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


async def stop_pipeline(rt: Runtime, keep_producer: bool = False) -> None:
    """Cancel the decide stage (a batch cut short is not committed), stop its clients and the producer."""
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
    if rt.decided_offsets is not None:
        await rt.decided_offsets.flush()
        rt.decided_offsets = None
    for client in (*rt.consumers, None if keep_producer else rt.producer, rt.txn_producer):
        if client is not None:
            with contextlib.suppress(Exception):
                await client.stop()
    rt.consumers.clear()
    rt.txn_producer = None
    if rt.shard_client is not None:
        await rt.shard_client.stop()
        rt.shard_client = None


async def stop_sign_stage(rt: Runtime) -> None:
    """Cancel the sign stage (it commits what was forwarded) and stop its producer."""
    task, stage = rt.sign_task, rt.sign
    if task is not None:
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
    if stage is not None:
        with contextlib.suppress(Exception):
            await stage.producer.stop()
    rt.sign_task = None


async def _decide_loop(app: faust.App, rt: Runtime) -> None:
    """Read the index partition after the last decided offset and decide batch after batch.

    A batch is whatever arrived while the previous one was decided (at most ``batch_size``
    records); when nothing is waiting, the fetch returns as soon as a record arrives.
    """
    from aiokafka import TopicPartition

    s = rt.settings
    if rt.sizes is None:
        rt.sizes = await read_topic_limits(s)
        limit, bound = rt.sizes.doc_limit(s)
        if limit < s.max_doc_bytes:
            log.info("documents over %d bytes are too-large (the %s leaves no room for more)", limit, bound)
        rt.parse_limits = s.parse_limits(limit)
    rt.store.limits = rt.sizes
    # at_least_once commits the decided position as the decide group's offset, for lag exporters
    # (exactly_once's transactions commit it); it is never read back from there
    consumer = _new_consumer(s, "decide", None if s.exactly_once else s.decide_group)
    rt.consumers.append(consumer)
    await consumer.start()
    tp = TopicPartition(s.index_topic, 0)
    consumer.assign([tp])
    consumer.seek(tp, rt.index_offset + 1)
    if not s.exactly_once:
        rt.decided_offsets = DecidedOffsets(consumer, tp)
    log.info("%s[0]: reading from offset %d (first undecided record)", s.index_topic, rt.index_offset + 1)
    messages: list[Any] = []
    while True:
        if not messages:
            fetched = await consumer.getmany(tp, timeout_ms=int(1000 * s.batch_wait) or 1, max_records=s.batch_size)
            messages = fetched.get(tp) or []
            if rt.decided_offsets is not None:
                rt.decided_offsets.tick()
            if not messages:
                continue
        run = first_run(messages)  # expiry records are decided in batches of their own
        await rt.gate.wait()
        async with rt.deciding:
            if (
                not rt.gate.is_set()
                or app.rebalancing
                or faust_compat.in_recovery(app)
                or not owns_index(app, rt)
                or not_member(rt)
            ):
                # A rebalance started, Faust is re-reading changelogs, or the group gave the index
                # partition (the single writer's role) to another worker: decide nothing meanwhile.
                rt.gate.clear()
                continue
            quiet = [m for m in run if m.offset < rt.replay_until]
            if quiet:
                log.warning("deciding %d records again without publishing (their outputs are committed)", len(quiet))
                await decide_safely(rt, quiet, False, _decide_batch, _reset_engine)
            loud = run[len(quiet) :]
            if loud:
                await decide_safely(rt, loud, True, _decide_batch, _reset_engine)
        # Records not decided (given up when the gate closed: index shards moving) wait for it to reopen.
        messages = [m for m in messages if m.offset > rt.index_offset]


async def _reset_engine(rt: Runtime) -> None:
    """Drop what a failed batch staged: re-apply a half-written journal, rebuild the engine from the store."""
    engine = rt.engine
    assert engine is not None
    rt.store.recover(INDEX_OFFSET_KEY)  # a failure inside the local write: whole batches only
    loop = asyncio.get_running_loop()
    store = await engine_store(rt, _new_consumer)
    rt.engine = await loop.run_in_executor(None, DedupeEngine, engine.params, store, engine.limits)
    rt.metrics.restart_counters()


async def _decide_batch(
    rt: Runtime, messages: list[Any], publish: bool = True, override: Invalid | None = None
) -> None:
    """Decide one batch: process, publish and await acks, then commit (see the module docstring).

    ``publish=False`` (exactly_once recovery) decides and commits the state without publishing.
    ``override``: the outcome of every record instead of parsing it (a poison record's).
    """
    s, engine, store, producer = rt.settings, rt.engine, rt.store, rt.producer
    assert engine is not None and producer is not None and rt.parse_limits is not None and rt.sizes is not None
    # The previous batch's changelog on the broker before any new work: the engine runs on this
    # loop, so a send still pending here would leave only once this batch is processed, and a
    # decider frozen meanwhile (then replaced) would land it after its successor's (membership.py).
    await await_settled(rt)
    records: list[Record] = []
    origins: list[Origin] = []
    signed: list[Signed | None] = []
    new_offsets: dict[tuple[str, int], int] = {}
    kept: list[tuple[Any, Origin]] = []
    for m in messages:
        if m.offset <= rt.index_offset:
            continue
        origin = origin_of(m)
        tp = (origin.topic, origin.partition)
        if origin.offset <= max(rt.decided.get(tp, -1), new_offsets.get(tp, -1)):
            continue  # decided before a restart (or forwarded twice by route)
        new_offsets[tp] = origin.offset
        kept.append((m, origin))
    expiring = override is None and bool(kept) and is_expiry(kept[0][0])  # then all are (first_run)
    if expiring:
        for deletion, origin in await expiry_deletions(rt, kept):
            records.append(deletion)
            origins.append(origin)
            signed.append(None)
    else:
        for m, origin in kept:
            records.append(override or record_of(m, rt.parse_limits))
            origins.append(origin)
            signed.append(None if override else signature_of(engine, m))
    if override is None:
        poison_fault(records)
    last_index = messages[-1].offset
    meta: dict[bytes, bytes | None] = {INDEX_OFFSET_KEY: b"%d" % last_index}
    if records:
        decided = await call_engine(rt, engine.process, records, [o.as_dict() for o in origins], signed)
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
            key = event_id.encode() if event_id else short_key(s, origin.key)
            outputs.append((s.events_topic, key, dumps(event), headers))
            if event["event"] == "invalid":
                letter = invalid_letter(s, rt.sizes, event, origin)
                outputs.append((s.dlq_topic, short_key(s, origin.key), letter, headers))
        for doc_id, raw in updates:
            outputs.append((s.deduped_topic, doc_id.encode(), raw, ()))
        outputs = fit_outputs(s, rt.sizes, rt.metrics, outputs)
        if publish:
            ensure_member(rt, "publishing a batch")
            if s.exactly_once:
                await publish_transaction(rt, outputs, last_index)
                fault_point("after-publish")
            else:
                for future in await publish_outputs(rt, outputs):
                    await future  # every output acknowledged before the state records the decision
            now = time.time()
            for origin in origins:
                if origin.timestamp:
                    rt.metrics.latency.observe(max(now - origin.timestamp, 0.0))
        rt.metrics.record_batch(decided, engine.counters, len(records))
    for (topic, partition), offset in new_offsets.items():
        meta[INPUT_OFFSET_PREFIX + f"{topic}:{partition}".encode()] = b"%d" % offset
    await await_settled(rt)  # previous batch's changelog acked (never cut short by a stop)
    ensure_member(rt, "writing a batch's state")
    await call_engine(rt, engine.commit, meta)
    # The changelog acks are not on the events' critical path: the next fetch waits meanwhile,
    # and the next batch awaits them before it starts.
    rt.settling = asyncio.ensure_future(store.settle(producer))
    if rt.decided_offsets is not None:
        rt.decided_offsets.settled(rt.settling, last_index + 1)
    rt.index_offset = last_index
    rt.decided.update(new_offsets)
    if expiring and publish:
        rt.metrics.expired.inc(len(records))
