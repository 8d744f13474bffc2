"""``stream-dedupe worker-reshard``: a worker deployment's state, copied to a new app id with another shard count.

The state of a worker deployment is its changelog topics. With every worker of app ``A``
stopped, this job copies them into app ``B``'s (created here): the decider's tables record by
record (offset order per key, so compaction keeps the same final values), the signatures,
shingle sets and joined bands of each document into its owner's partition under the new count,
and a meta record per shard with the layout and the last commit. ``B``'s decider then continues
where ``A`` stopped: its stored input positions say which input records are decided, the sign
group ``<B>-sign`` starts at them, and the events, deduped and DLQ topics are the same topics.
Start ``B``'s workers with ``--app-id B --index-shards S``; delete ``A``'s topics when ``B`` runs.

Refused while a worker of ``A`` runs (a member of its consumer group: a copy taken meanwhile
would not go on from it), and when ``A`` stopped in the middle of a batch (a journal in its meta,
or shards behind the decider's last commit): start one worker of ``A`` until it is ready, which
finishes the batch.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any

import numpy as np
import orjson
import typer

from stream_dedupe.config import DedupeParams
from stream_dedupe.core.layout import resolve
from stream_dedupe.core.sharding.gather import LAYOUT_KEY, OUTBOX_KEY, owner
from stream_dedupe.core.sharding.ops import ShardOps, decode_all, encode_all
from stream_dedupe.core.sharding.outbox import is_outbox_key, read_outbox_from
from stream_dedupe.core.sharding.shard import APPLIED_KEY, SHARDED_NAMESPACES, shard_meta
from stream_dedupe.errors import StreamDedupeError
from stream_dedupe.storage.base import NAMESPACES
from stream_dedupe.storage.docrecord import DocRecord
from stream_dedupe.worker.cli_options import (
    Broker,
    DedupedTopic,
    DlqTopic,
    EventsTopic,
    InputPartitions,
    InputTopic,
    SaslMechanism,
    SaslPassword,
    SaslPasswordFile,
    SaslUsername,
    SecurityProtocol,
    SslCafile,
    SslCertfile,
    SslKeyfile,
    err,
    opt,
)
from stream_dedupe.worker.faust_compat import throttle_metadata_retries
from stream_dedupe.worker.journal import JOURNAL_HEAD
from stream_dedupe.worker.pipeline import INDEX_OFFSET_KEY, INPUT_OFFSET_PREFIX
from stream_dedupe.worker.produce import send_batches
from stream_dedupe.worker.settings import WorkerSettings
from stream_dedupe.worker.topics import changelog_topic, prepare_worker_topics, shard_changelog_topic

log = logging.getLogger("stream_dedupe.worker.reshard")
_CHUNK = 2000


class ReshardError(StreamDedupeError):
    """The re-shard cannot run as asked; the message says what to do."""


async def reshard_app(source: WorkerSettings, target: WorkerSettings) -> dict[str, int]:
    """Copy app ``source.app_id``'s state into the new app ``target.app_id`` (``target.index_shards``).

    Returns:
        Records copied per kind.

    Raises:
        ReshardError: if the source runs, has no state or stopped mid-batch, or the target exists.

    """
    from aiokafka import AIOKafkaProducer  # type: ignore[import-untyped]

    if source.app_id == target.app_id:
        raise ReshardError("--from-app and --to-app are the same: give the copy a new app id")
    live = await _live_members(source)
    if live:
        raise ReshardError(
            f"app {source.app_id} is running ({live} member(s) in its consumer group {source.app_id}): "
            "stop every worker of it first, then run this again (its state changes while it runs, and a copy "
            "taken meanwhile would not go on from it; a worker killed a moment ago stays a member until its "
            "session times out, about 10 s)"
        )
    if not await _has_records(source, changelog_topic(source, "meta")):
        raise ReshardError(
            f"app {source.app_id} has no state on {source.bootstrap} (no records in "
            f"{changelog_topic(source, 'meta')}): check --from-app and --broker"
        )
    meta = await _final(source, changelog_topic(source, "meta"), 0)
    if b"params" not in meta:
        raise ReshardError(f"app {source.app_id} has no state (its meta changelog is empty): nothing to copy")
    if JOURNAL_HEAD in meta:
        raise ReshardError(_MID_BATCH.format(app=source.app_id, what="its decider journaled a batch it did not finish"))
    params = resolve(DedupeParams.from_state(orjson.loads(meta[b"params"])))
    old = int(meta.get(LAYOUT_KEY, b"1"))
    stored_outbox = read_outbox_from(meta)
    number = decode_all(stored_outbox)[0] if stored_outbox is not None else 0
    if old > 1:
        for shard in range(old):
            applied = int((await _final(source, shard_changelog_topic(source, "meta"), shard)).get(APPLIED_KEY, b"0"))
            if applied != number:
                raise ReshardError(
                    _MID_BATCH.format(app=source.app_id, what=f"shard {shard} holds commit {applied}, not {number}")
                )
    new = target.index_shards
    if await _has_records(target, changelog_topic(target, "meta")):
        raise ReshardError(f"app {target.app_id} has a state already: give the copy a new app id")
    await prepare_worker_topics(target, wait=30)
    throttle_metadata_retries()
    producer = AIOKafkaProducer(bootstrap_servers=target.bootstrap, **target.kafka_security(), acks="all")
    await producer.start()
    counts: dict[str, int] = {}
    try:
        for ns in NAMESPACES:
            if ns == "meta" or (ns in SHARDED_NAMESPACES and (old > 1 or new > 1)):
                continue
            records = _records(source, changelog_topic(source, ns), 0)
            counts[ns] = await _copy(producer, records, _to(changelog_topic(target, ns), 0))
        await _send(producer, changelog_topic(target, "meta"), 0, list(_new_meta(meta, new, number).items()))
        if old > 1 or new > 1:
            counts.update(await _copy_index(source, target, producer, old, params.bands))
        for shard in range(new if new > 1 else 0):
            entries = shard_meta(shard, new, params.bands, params.rows, number)
            await _send(producer, shard_changelog_topic(target, "meta"), shard, list(entries.items()))
    finally:
        await producer.stop()
    await _seed_sign_group(target, meta)
    return counts


def _to(topic: str, partition: int) -> Callable[[bytes], tuple[str, int]]:
    return lambda _key: (topic, partition)


_MID_BATCH = (
    "app {app} stopped in the middle of a batch ({what}): start one of its workers until it is ready "
    "(it finishes the batch), stop it, and run the re-shard again"
)


def _new_meta(meta: dict[bytes, bytes], shards: int, number: int) -> dict[bytes, bytes | None]:
    """The decider's meta for the copy: the new layout; no index position (the copy has its own index)."""
    out: dict[bytes, bytes | None] = {k: v for k, v in meta.items() if k != LAYOUT_KEY and not is_outbox_key(k)}
    out[INDEX_OFFSET_KEY] = None
    if shards > 1:
        out[LAYOUT_KEY] = str(shards).encode()
        out[OUTBOX_KEY] = encode_all(number, [ShardOps() for _ in range(shards)])
    return out


async def _copy_index(
    source: WorkerSettings, target: WorkerSettings, producer: Any, old: int, bands: int
) -> dict[str, int]:
    """Signatures, shingle sets and joined bands of every document, to their owners under the new count."""
    new = target.index_shards
    counts = {}

    def route(ns: str) -> Callable[[bytes], tuple[str, int]]:
        if new > 1:
            return lambda key: (shard_changelog_topic(target, ns), owner(key, new))
        return lambda key: (changelog_topic(target, ns), 0)

    for ns in SHARDED_NAMESPACES:
        if old > 1:
            counts[ns] = 0
            for shard in range(old):
                records = _records(source, shard_changelog_topic(source, ns), shard)
                counts[ns] += await _copy(producer, records, route(ns))
        else:
            counts[ns] = await _copy(producer, _records(source, changelog_topic(source, ns), 0), route(ns))
    if new < 2:
        return counts
    if old > 1:
        counts["bands"] = 0
        for shard in range(old):
            records = _records(source, shard_changelog_topic(source, "docs"), shard)
            counts["bands"] += await _copy(producer, records, route("docs"))
    else:  # an unsharded index joins every band of an indexed document (its rebuild at start does so)
        every = np.packbits(np.ones(bands, dtype=bool)).tobytes()
        docs = await _final(source, changelog_topic(source, "docs"), 0)
        indexed = [(k, every) for k, v in sorted(docs.items()) if DocRecord.decode(v).indexed]
        counts["bands"] = await _copy(producer, _listed(indexed), route("docs"))
    return counts


async def _listed(items: list[tuple[bytes, bytes]]) -> AsyncIterator[tuple[bytes, bytes | None]]:
    for item in items:
        yield item


async def _copy(
    producer: Any, records: AsyncIterator[tuple[bytes, bytes | None]], route: Callable[[bytes], tuple[str, int]]
) -> int:
    """Send ``records`` in order, each to the (topic, partition) ``route`` gives its key; how many."""
    pending: dict[tuple[str, int], list[tuple[bytes, bytes | None]]] = {}
    copied = 0
    async for key, value in records:
        where = route(key)
        batch = pending.setdefault(where, [])
        batch.append((key, value))
        copied += 1
        if len(batch) >= _CHUNK:
            await _send(producer, where[0], where[1], pending.pop(where))
    for (topic, partition), batch in pending.items():
        await _send(producer, topic, partition, batch)
    return copied


async def _send(producer: Any, topic: str, partition: int, records: list[tuple[bytes, bytes | None]]) -> None:
    for future, _ in await send_batches(producer, topic, partition, records, max_bytes=1 << 20):
        await future


async def _records(settings: WorkerSettings, topic: str, partition: int) -> AsyncIterator[tuple[bytes, bytes | None]]:
    """Every record of one partition, from the start to the end it has now (tombstones as None)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=8 << 20,
        **settings.kafka_security(),
    )
    await consumer.start()
    try:
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        end = (await consumer.end_offsets([tp]))[tp]
        await consumer.seek_to_beginning(tp)
        while await consumer.position(tp) < end:
            for message in (await consumer.getmany(tp, timeout_ms=1000)).get(tp, []):
                if message.offset < end and message.key is not None:
                    yield message.key, message.value
    finally:
        await consumer.stop()


async def _final(settings: WorkerSettings, topic: str, partition: int) -> dict[bytes, bytes]:
    """The final values of one (small) changelog partition."""
    out: dict[bytes, bytes] = {}
    async for key, value in _records(settings, topic, partition):
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


async def _has_records(settings: WorkerSettings, topic: str) -> bool:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=settings.bootstrap, group_id=None, **settings.kafka_security())
    await consumer.start()
    try:
        if topic not in await consumer.topics():
            return False
        tp = TopicPartition(topic, 0)
        return bool((await consumer.end_offsets([tp]))[tp])
    finally:
        await consumer.stop()


async def _live_members(settings: WorkerSettings) -> int:
    """Members of the app's Faust consumer group: every running worker is one.

    Only that group is described: aiokafka cannot decode the description of a group of its own
    consumers (the sign stage's) from this broker. A failed look-up is logged and taken as none.
    """
    from aiokafka.errors import KafkaError  # type: ignore[import-untyped]

    from stream_dedupe.worker.admin import connect_admin

    admin = await connect_admin(settings.bootstrap, 30, settings=settings)
    try:
        responses = await admin.describe_consumer_groups([settings.app_id])
    except (KafkaError, ValueError) as exc:
        log.warning("cannot tell whether app %s runs (%r): stop every worker of it first", settings.app_id, exc)
        return 0
    finally:
        await admin.close()
    # each group: (error, group, state, protocol type, protocol, members, ...)
    return sum(len(g[5]) for r in responses for g in r.groups if g[1] == settings.app_id)


async def _seed_sign_group(target: WorkerSettings, meta: dict[bytes, bytes]) -> None:
    """Start the copy's sign group after the input records the copied state has decided."""
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.structs import OffsetAndMetadata  # type: ignore[import-untyped]

    offsets = {}
    for key, value in meta.items():
        if key.startswith(INPUT_OFFSET_PREFIX):
            topic, _, partition = key[len(INPUT_OFFSET_PREFIX) :].decode().rpartition(":")
            offsets[TopicPartition(topic, int(partition))] = OffsetAndMetadata(int(value) + 1, "")
    if not offsets:
        return
    consumer = AIOKafkaConsumer(
        bootstrap_servers=target.bootstrap,
        group_id=f"{target.app_id}-sign",
        enable_auto_commit=False,
        **target.kafka_security(),
    )
    await consumer.start()
    try:
        consumer.assign(list(offsets))
        await consumer.commit(offsets)
    finally:
        await consumer.stop()


def worker_reshard(
    from_app: Annotated[str, typer.Option(help="App id of the stopped deployment to copy (left unchanged).")],
    to_app: Annotated[str, typer.Option(help="App id of the copy (new: its topics are created).")],
    index_shards: Annotated[int, typer.Option(help="Index shards of the copy (1: none).")],
    broker: Broker = None,
    input_topic: InputTopic = None,
    events_topic: EventsTopic = None,
    deduped_topic: DedupedTopic = None,
    dlq_topic: DlqTopic = None,
    input_partitions: InputPartitions = None,
    replication_factor: Annotated[
        int | None, opt("replication_factor", "Replicas of the copy's topics [default: 3].")
    ] = None,
    security_protocol: SecurityProtocol = None,
    sasl_mechanism: SaslMechanism = None,
    sasl_username: SaslUsername = None,
    sasl_password: SaslPassword = None,
    sasl_password_file: SaslPasswordFile = None,
    ssl_cafile: SslCafile = None,
    ssl_certfile: SslCertfile = None,
    ssl_keyfile: SslKeyfile = None,
) -> None:
    """Copy a stopped worker deployment's state to a new app id with another number of index shards."""
    common: dict[str, Any] = {
        "broker": broker,
        "input_topic": input_topic,
        "events_topic": events_topic,
        "deduped_topic": deduped_topic,
        "dlq_topic": dlq_topic,
        "input_partitions": input_partitions,
        "replication_factor": replication_factor,
        "security_protocol": security_protocol,
        "sasl_mechanism": sasl_mechanism,
        "sasl_username": sasl_username,
        "sasl_password": sasl_password,
        "sasl_password_file": sasl_password_file,
        "ssl_cafile": ssl_cafile,
        "ssl_certfile": ssl_certfile,
        "ssl_keyfile": ssl_keyfile,
    }
    source = WorkerSettings.load(app_id=from_app, **common)
    target = WorkerSettings.load(app_id=to_app, index_shards=index_shards, **common)
    counts = asyncio.run(reshard_app(source, target))
    err.print(
        f"copied app {from_app} to {to_app} with {index_shards} index shard(s): "
        + ", ".join(f"{n:,} {kind}" for kind, n in counts.items())
        + f"; start its workers with --app-id {to_app} --index-shards {index_shards}"
    )
