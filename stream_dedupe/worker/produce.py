"""Loading JSONL corpora into the input topic (backfills, demos, benchmarks).

Each non-blank line becomes one record: key = the document's ``id`` when the line is a JSON
object with a string id (else no key), value = the line's bytes unchanged (bad lines are sent
too: the worker routes them to the DLQ). Returns only when the broker acknowledged every record,
or refused it as too large: a line larger than the topic's ``max.message.bytes`` is counted in
:attr:`ProduceResult.refused` (with its file and line) and the rest are sent.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from aiokafka import AIOKafkaProducer  # type: ignore[import-untyped]
from aiokafka.errors import (  # type: ignore[import-untyped]
    MessageSizeTooLargeError,
    OutOfOrderSequenceNumber,
    RecordListTooLargeError,
    RecordTooLargeError,
)

from stream_dedupe.inputs import read_lines
from stream_dedupe.worker.faust_compat import throttle_metadata_retries
from stream_dedupe.worker.security import client_security
from stream_dedupe.worker.settings import WorkerSettings
from stream_dedupe.worker.sizes import FRAMING, record_bytes

#: Called with (records sent so far, bytes of input consumed so far).
ProgressHook = Callable[[int, int], None]

_WINDOW = 2000  # records in flight before waiting for their acknowledgements
#: The client's limit on one request (``max_request_size``): a larger line is refused before it is sent.
MAX_REQUEST_BYTES = 8 << 20


@dataclass
class ProduceResult:
    """What ``produce`` sent.

    Attributes:
        records: Records acknowledged by the broker.
        refused: Records refused for good, by the broker (larger than the topic's
            ``max.message.bytes``) or by the client (larger than ``max_request_size``); the
            others were sent all the same.
        refused_by_client: Those of ``refused`` the client refused before sending them.
        first_refused: Where the first refused record is (``file:line``) and why.
        without_key: Records sent without a key (no readable ``id``).
        blank: Blank lines skipped.
        bytes: Bytes of record values acknowledged.
        seconds: Wall time.

    """

    records: int = 0
    without_key: int = 0
    blank: int = 0
    bytes: int = 0
    seconds: float = 0.0
    refused: int = 0
    refused_by_client: int = 0
    first_refused: str | None = None
    _first_ordinal: int = -1

    def refuse(self, where: str, exc: BaseException, by_client: bool = False, ordinal: int = 0) -> None:
        """Count a record the broker (or the client) refused for good; the first in input order is kept.

        ``ordinal``: the record's place in the input. The client refuses a record as it is sent and
        the broker only when its batch is acknowledged, so refusals arrive out of input order.
        """
        self.refused += 1
        self.refused_by_client += by_client
        if self.first_refused is None or ordinal < self._first_ordinal:
            self.first_refused, self._first_ordinal = f"{where}: {type(exc).__name__}: {exc}", ordinal

    def acknowledgement(self) -> str:
        """The summary's last part: ``all acknowledged``, or who refused how many records."""
        if not self.refused:
            return "all acknowledged"
        by_broker = self.refused - self.refused_by_client
        parts = [f"{by_broker:,} refused by the broker"] if by_broker else []
        if self.refused_by_client:
            parts.append(f"{self.refused_by_client:,} refused by the client (over {MAX_REQUEST_BYTES >> 20} MiB)")
        return ", ".join(parts)


def document_key(raw: bytes) -> bytes | None:
    """The ``id`` of a JSON document line as key bytes, or None if it cannot be read."""
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if isinstance(value, dict) and isinstance(value.get("id"), str) and value["id"]:
        return str(value["id"]).encode("utf-8")
    return None


def iter_records(paths: Iterable[str], result: ProduceResult) -> Iterator[tuple[bytes | None, bytes, int, str]]:
    """``(key, value, bytes position, "file:line")`` of every non-blank line of ``paths``."""
    offset = 0
    for path in paths:
        last = 0
        for line in read_lines(path):
            last = line.position
            if not line.raw.strip():
                result.blank += 1
                continue
            yield document_key(line.raw), line.raw, offset + line.position, f"{path}:{line.line}"
        offset += last


#: A record the topic will never take (the broker's answer, or the client's own size check).
_TOO_LARGE = (MessageSizeTooLargeError, RecordTooLargeError, RecordListTooLargeError)
#: The failures of a batch refused for its size, and of the batches sent after it to that partition.
_REFUSED_BATCH = (*_TOO_LARGE, OutOfOrderSequenceNumber)

Pending = list[tuple[int, str, bytes | None, bytes, "asyncio.Future[object]"]]


class _Sender:
    """One idempotent producer, replaced by a new one after a batch is refused.

    The broker refuses a whole producer batch (e.g. over the topic's ``max.message.bytes``), and
    then the idempotent producer's sequence numbers for that partition no longer match the
    broker's (every later send there fails with ``OutOfOrderSequenceNumber``). So the records of
    a refused batch are sent again one at a time by a new producer: only the oversize one is
    refused, and the rest of the input goes on.
    """

    def __init__(self, topic: str, config: dict[str, Any], result: ProduceResult) -> None:
        self.topic, self.config, self.result = topic, config, result
        self.producer: Any = None
        self.pending: Pending = []
        self.sent = 0  # records handed to send(), in input order

    async def start(self) -> None:
        throttle_metadata_retries()  # no spinning on refused connections while the broker is down
        self.producer = AIOKafkaProducer(**self.config)
        await self.producer.start()

    async def stop(self) -> None:
        if self.producer is not None:
            await self.producer.stop()
            self.producer = None

    async def renew(self) -> None:
        """A new producer (a new producer id): the sequence numbers start again."""
        await self.stop()
        await self.start()

    async def send(self, where: str, key: bytes | None, value: bytes) -> None:
        ordinal, self.sent = self.sent, self.sent + 1
        try:
            self.pending.append((ordinal, where, key, value, await self.producer.send(self.topic, value, key=key)))
        except _TOO_LARGE as exc:  # refused before it is sent (over max_request_size)
            self.result.refuse(where, exc, by_client=True, ordinal=ordinal)

    async def settle(self) -> None:
        """Wait for the acknowledgements in flight; a record too large for the topic is counted, not fatal.

        Any other error ends the load as before (an authorization error is no record's fault).
        """
        outcomes = await asyncio.gather(*(future for *_, future in self.pending), return_exceptions=True)
        again = []
        for (ordinal, where, key, value, _), outcome in zip(self.pending, outcomes, strict=True):
            if isinstance(outcome, _REFUSED_BATCH):  # too large, or sent after such a batch
                again.append((ordinal, where, key, value))
            elif isinstance(outcome, BaseException):
                raise outcome
            else:
                self._acknowledged(value)
        self.pending.clear()
        if not again:
            return
        await self.renew()
        for ordinal, where, key, value in again:
            try:
                await (await self.producer.send(self.topic, value, key=key))
            except _TOO_LARGE as exc:
                self.result.refuse(where, exc, ordinal=ordinal)
                await self.renew()  # its sequence numbers are off now: a new producer for the next one
            else:
                self._acknowledged(value)

    def _acknowledged(self, value: bytes) -> None:
        self.result.records += 1
        self.result.bytes += len(value)


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
    config = {
        "bootstrap_servers": bootstrap,
        "acks": "all",
        "enable_idempotence": True,
        "linger_ms": linger_ms,
        "max_batch_size": 1 << 20,
        "max_request_size": MAX_REQUEST_BYTES,
        "compression_type": compression,
        **(security or {}),
    }
    sender = _Sender(topic, config, result)
    await sender.start()
    try:
        position = 0
        for key, value, position, where in iter_records(paths, result):
            result.without_key += key is None
            await sender.send(where, key, value)
            if len(sender.pending) >= _WINDOW:
                await sender.settle()
                if progress:
                    progress(result.records, position)
        await sender.settle()
        if progress:
            progress(result.records, position)
    finally:
        await sender.stop()
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
