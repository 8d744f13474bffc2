"""Loading JSONL corpora into the input topic (backfills, demos, benchmarks).

Each non-blank line becomes one record: key = the document's ``id`` when the line is a JSON
object with a string id (else no key), value = the line's bytes unchanged (bad lines are sent
too: the worker routes them to the DLQ). Returns only when the broker acknowledged every record.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from aiokafka import AIOKafkaProducer  # type: ignore[import-untyped]

from stream_dedupe.inputs import read_lines
from stream_dedupe.worker.security import client_security
from stream_dedupe.worker.settings import WorkerSettings
from stream_dedupe.worker.sizes import FRAMING, record_bytes

#: Called with (records sent so far, bytes of input consumed so far).
ProgressHook = Callable[[int, int], None]

_WINDOW = 2000  # records in flight before waiting for their acknowledgements


@dataclass
class ProduceResult:
    """What ``produce`` sent.

    Attributes:
        records: Records acknowledged by the broker.
        without_key: Records sent without a key (no readable ``id``).
        blank: Blank lines skipped.
        bytes: Bytes of record values sent.
        seconds: Wall time.

    """

    records: int = 0
    without_key: int = 0
    blank: int = 0
    bytes: int = 0
    seconds: float = 0.0


def document_key(raw: bytes) -> bytes | None:
    """The ``id`` of a JSON document line as key bytes, or None if it cannot be read."""
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if isinstance(value, dict) and isinstance(value.get("id"), str) and value["id"]:
        return str(value["id"]).encode("utf-8")
    return None


def iter_records(paths: Iterable[str], result: ProduceResult) -> Iterator[tuple[bytes | None, bytes, int]]:
    """``(key, value, bytes position)`` of every non-blank line of ``paths``."""
    offset = 0
    for path in paths:
        last = 0
        for line in read_lines(path):
            last = line.position
            if not line.raw.strip():
                result.blank += 1
                continue
            yield document_key(line.raw), line.raw, offset + line.position
        offset += last


async def produce(
    bootstrap: str,
    topic: str,
    paths: list[str],
    progress: ProgressHook | None = None,
    linger_ms: int = 5,
    security: Mapping[str, Any] | None = None,
    compression: str | None = "zstd",
) -> ProduceResult:
    """Send every line of ``paths`` to ``topic`` and wait for all acknowledgements.

    ``security``: client security arguments (:func:`~stream_dedupe.worker.security.client_security`).
    ``compression``: aiokafka ``compression_type`` (None: none).
    """
    result = ProduceResult()
    started = time.perf_counter()
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        enable_idempotence=True,
        linger_ms=linger_ms,
        max_batch_size=1 << 20,
        max_request_size=8 << 20,
        compression_type=compression,
        **(security or {}),
    )
    await producer.start()
    try:
        pending: list[asyncio.Future[object]] = []
        position = 0
        for key, value, position in iter_records(paths, result):
            pending.append(await producer.send(topic, value, key=key))
            result.without_key += key is None
            result.bytes += len(value)
            if len(pending) >= _WINDOW:
                await asyncio.gather(*pending)
                result.records += len(pending)
                pending.clear()
                if progress:
                    progress(result.records, position)
        await asyncio.gather(*pending)
        result.records += len(pending)
        if progress:
            progress(result.records, position)
    finally:
        await producer.stop()
    result.seconds = time.perf_counter() - started
    return result


async def start_worker_producer(settings: WorkerSettings, role: str = "decide", transactional: bool = False) -> Any:
    """A started producer for one stage: ``decide`` (events, deduped, DLQ, table changelogs) or ``sign``.

    Acks from all in-sync replicas; a long request timeout so that a broker outage makes the
    worker wait (and retry) rather than fail. ``transactional``: the decide stage's output
    producer under ``exactly_once``, with the app's fixed transactional id, so that starting it
    fences (and aborts the open transaction of) any previous decider.
    """
    # Idempotent in every case: a retried send (broker failover, timeout) is written once.
    txn: dict[str, Any] = {"enable_idempotence": True}
    if transactional:
        txn = {"transactional_id": f"{settings.app_id}-decide", "enable_idempotence": True}
        role = "decide-txn"
    producer = AIOKafkaProducer(
        bootstrap_servers=settings.bootstrap,
        acks="all",
        linger_ms=2,
        max_batch_size=900_000,
        max_request_size=8 << 20,
        request_timeout_ms=1_200_000,
        compression_type=settings.producer_compression,  # batches are cut to the topics' limits uncompressed
        client_id=f"{settings.app_id}-{role}",
        **txn,
        **client_security(settings),
    )
    await producer.start()
    return producer


Headers = Sequence[tuple[str, bytes]]


async def send_batches(
    producer: Any,
    topic: str,
    partition: int,
    records: Sequence[tuple[bytes | None, bytes | None]],
    headers: Sequence[Headers] | None = None,
    max_bytes: int | None = None,
) -> list[tuple[Any, int]]:
    """Send records to one partition as whole producer batches; ``(ack future, records)`` per batch.

    One ``send_batch`` per ~1 MB instead of one ``send`` per record: the changelog of a batch of
    500 documents is a few thousand records. ``max_bytes`` (the topic's ``max.message.bytes``)
    caps every batch, uncompressed; a record larger than it on its own is sent alone (callers
    check sizes first, see :mod:`stream_dedupe.worker.sizes`).
    """
    out: list[tuple[Any, int]] = []
    batch, count, size = producer.create_batch(), 0, FRAMING
    # what a record adds to a batch: record_bytes() without the batch header, inlined for the
    # header-less records of the changelogs (called for every record, ~8 a document)
    bare = record_bytes(None, None) - FRAMING + 21
    for i, (key, value) in enumerate(records):
        if headers:
            extra = list(headers[i])
            need = record_bytes(key, value, extra) - FRAMING + 21
        else:
            extra = []
            need = bare + (len(key) if key is not None else 0) + (len(value) if value is not None else 0)
        if max_bytes is not None and count and size + need > max_bytes:
            batch.close()
            out.append((await producer.send_batch(batch, topic, partition=partition), count))
            batch, count, size = producer.create_batch(), 0, FRAMING
        if batch.append(key=key, value=value, timestamp=None, headers=extra) is None:
            if count == 0:
                raise ValueError(f"a record of {len(value or b'')} bytes does not fit a producer batch ({topic})")
            batch.close()
            out.append((await producer.send_batch(batch, topic, partition=partition), count))
            batch, count, size = producer.create_batch(), 0, FRAMING
            if batch.append(key=key, value=value, timestamp=None, headers=extra) is None:
                raise ValueError(f"a record of {len(value or b'')} bytes does not fit a producer batch ({topic})")
        count += 1
        size += need
    if count:
        batch.close()
        out.append((await producer.send_batch(batch, topic, partition=partition), count))
    return out
