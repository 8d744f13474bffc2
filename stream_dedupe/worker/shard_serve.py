"""An index shard inside a worker: partition ``i`` of ``<app>-shard-requests``, with its state.

With ``--index-shards S`` (S >= 2) the shard requests topic has S partitions and the shard
tables (``shard-sigs``, ``shard-sets``, ``shard-docs``, ``shard-meta``) have S partitions each,
changelogged to compacted topics. Faust's consumer group assigns partition ``i`` of the requests
topic and partition ``i`` of every shard table to one worker (co-partitioned: same partition
count), and recovers the table partition from its changelog when it moves. That worker then runs
a :class:`ShardServer` for it: an :class:`~stream_dedupe.core.sharding.shard.IndexShard` over a
:class:`~stream_dedupe.worker.store.FaustTableStore` of partition ``i`` (journaled, changelogged
like the decider's state), fed by its own consumer of the requests partition.

Position. Each applied commit stores the offset of its request in the shard's state, in the same
atomic write. A worker that takes the shard over restores the state from the changelogs and
reads the requests after that offset: commits are applied again (a shard skips a commit number
it holds), reads are answered again (the decider drops answers it no longer waits for).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
import time
from dataclasses import dataclass
from typing import Any

from stream_dedupe.core.sharding.ops import ShardOps
from stream_dedupe.core.sharding.shard import IndexShard, stored_layout
from stream_dedupe.storage.rocks import tree_bytes
from stream_dedupe.worker import shard_wire as wire
from stream_dedupe.worker.metrics import WorkerMetrics
from stream_dedupe.worker.produce import send_batches
from stream_dedupe.worker.settings import WorkerSettings
from stream_dedupe.worker.store import FaustTableStore

log = logging.getLogger("stream_dedupe.worker.shard")

#: The shard tables' namespaces.
SHARD_NAMESPACES = ("meta", "docs", "sigs", "sets")
#: ``shard-meta`` key: offset of the last applied commit's request.
POSITION_KEY = b"shard:request-offset"


@dataclass
class _Event:
    """A stand-in event of the shard's requests partition (what the store's writes are bound to)."""

    message: Any


@dataclass
class _Message:
    topic: str
    partition: int


class ShardServer:
    """Serves shard ``shard`` in this worker until :meth:`stop`.

    Args:
        settings: The worker's settings.
        shard: The shard (the requests partition) this worker was assigned.
        tables: The shard tables (S partitions each).
        producer: The worker's started producer (answers, changelog records).
        new_consumer: Builds an unassigned consumer (the pipeline's ``_new_consumer``).

    """

    def __init__(
        self,
        settings: WorkerSettings,
        shard: int,
        tables: dict[str, Any],
        producer: Any,
        new_consumer: Any,
        metrics: WorkerMetrics | None = None,
    ) -> None:
        self.settings, self.shard, self.producer, self.metrics = settings, shard, producer, metrics
        self.store = FaustTableStore(
            tables, settings.state_dir / "journal" / f"shard-{shard}", partition=shard, namespaces=SHARD_NAMESPACES
        )
        self.store.bind(_Event(_Message(settings.shard_requests_topic, shard)))
        self.new_consumer = new_consumer
        self.part: IndexShard | None = None
        self.task: asyncio.Task[None] | None = None
        self.calls = 0
        self.applied_commits = 0
        self.offset = -1  # last request read
        self._sized_at = 0.0  # when the disk bytes were last measured (a directory walk)

    def start(self) -> None:
        """Start serving in a task."""
        self.task = asyncio.ensure_future(self._serve())

    async def stop(self) -> None:
        """Stop after the call in progress (its state written and its changelog acknowledged)."""
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.task
            self.task = None
        with contextlib.suppress(Exception):
            await self.store.settle(self.producer)
        if self.metrics is not None:  # the new holder reports this shard
            m = self.metrics
            for gauge in (m.shard_documents, m.shard_table_bytes, m.shard_lag, m.shard_state_bytes):
                with contextlib.suppress(KeyError):
                    gauge.remove(str(self.shard))

    def _report(self, consumer: Any, tp: Any, calls: int) -> None:
        m = self.metrics
        if m is None:
            return
        label = str(self.shard)
        m.shard_calls.labels(label).inc(calls)
        if self.part is not None:
            m.shard_documents.labels(label).set(self.part.documents)
            m.shard_table_bytes.labels(label).set(self.part.tables.nbytes)
        end = consumer.highwater(tp)
        if end is not None:
            m.shard_lag.labels(label).set(max(end - self.offset - 1, 0))
        if time.monotonic() - self._sized_at > 30:
            self._sized_at = time.monotonic()
            tables = self.settings.state_dir / "v1" / "tables"
            size = sum(tree_bytes(tables / f"shard-{ns}-{self.shard}.db") for ns in SHARD_NAMESPACES)
            m.shard_state_bytes.labels(label).set(size)

    async def _open(self) -> None:
        if self.store.recover(POSITION_KEY):
            log.warning("shard %d: re-applied a journaled write of a worker that stopped while writing it", self.shard)
        await self.store.settle(self.producer)
        layout = stored_layout(self.store)
        if layout is not None:
            await self._configure(layout["bands"], layout["rows"])

    async def _configure(self, bands: int, rows: int) -> None:
        if self.part is None:
            s = self.settings
            self.part = await asyncio.to_thread(IndexShard, self.store, self.shard, s.index_shards, bands, rows)
            log.info("shard %d: %d documents in the band tables", self.shard, self.part.documents)

    async def _serve(self) -> None:
        from aiokafka import TopicPartition  # type: ignore[import-untyped]

        await self._open()
        raw = self.store.get_many("meta", [POSITION_KEY])[0]
        start = 0 if raw is None else int(raw) + 1
        consumer = self.new_consumer(self.settings, f"shard-{self.shard}")
        await consumer.start()
        try:
            tp = TopicPartition(self.settings.shard_requests_topic, self.shard)
            consumer.assign([tp])
            consumer.seek(tp, start)
            log.info("shard %d: reading requests from offset %d", self.shard, start)
            assembler = wire.Assembler()
            while True:
                fetched = await consumer.getmany(tp, timeout_ms=500, max_records=512)
                replies: list[tuple[bytes, bytes]] = []
                wrote = False
                before = self.calls
                for message in fetched.get(tp) or []:
                    self.offset = message.offset
                    whole = assembler.add(message.value)
                    if whole is None:
                        continue
                    call, _, method, payload = whole
                    self.calls += 1
                    try:
                        answer = await self._handle(method, payload, message.offset)
                    except Exception as exc:  # the decider gets the message; the shard keeps serving
                        log.exception("shard %d: call %d failed", self.shard, call)
                        answer = (wire.ERROR, f"{type(exc).__name__}: {exc}".encode())
                    if answer is None:
                        wrote = True
                        continue
                    replies += wire.parts_of(call, self.shard, answer[0], answer[1])
                if wrote:
                    await self.store.settle(self.producer)
                if replies:
                    for future, _ in await send_batches(self.producer, self.settings.shard_replies_topic, 0, replies):
                        await future
                self._report(consumer, tp, self.calls - before)
        finally:
            await consumer.stop()

    async def _handle(self, method: int, payload: bytes, offset: int) -> tuple[int, bytes] | None:
        """One call; its answer ``(method, payload)``, or None for a commit (not answered)."""
        if method == wire.CONFIGURE:
            bands, rows = struct.unpack("<II", payload)
            await self._configure(bands, rows)
            assert self.part is not None
            return method, struct.pack("<Q", self.part.applied)
        part = self.part
        if part is None:
            raise RuntimeError(f"shard {self.shard} was not configured: the decider sends configure first")
        if method == wire.APPLY:
            (number,) = struct.unpack_from("<Q", payload, 0)
            if part.apply(number, ShardOps.decode(payload[8:]), {POSITION_KEY: b"%d" % offset}):
                self.applied_commits += 1
            return None
        (expected,) = struct.unpack_from("<Q", payload, 0)
        if part.applied != expected:
            raise wire_behind(self.shard, part.applied, expected)
        body = payload[8:]
        if method == wire.MEMBERS:
            idx, ids = part.members(*wire.unpack_buckets(body))
            return method, wire.pack_members(idx, ids)
        if method == wire.GET_MANY:
            namespace, *keys = wire.unpack_call(body)
            assert namespace is not None
            values = part.get_many(namespace.decode(), [k for k in keys if k is not None])
            return method, wire.pack_optional(values)
        if method == wire.COUNT:
            return method, struct.pack("<Q", self.store.count(body.decode()))
        raise ValueError(f"unknown shard call {method}")


def wire_behind(shard: int, applied: int, expected: int) -> RuntimeError:
    """The error a shard answers when it does not hold the commit the decider expects."""
    return RuntimeError(f"BEHIND shard {shard} holds commit {applied}, the decider expects {expected}")
