"""The sign stage: every worker signs its share of the input partitions for the decide stage.

Each worker is a member of the consumer group ``<app_id>-sign`` on the input topic, so the
input partitions are spread over all workers and the CPU-heavy part of the engine (normalize,
shingle, MinHash: :class:`~stream_dedupe.core.signer.Signer`) scales with them. A record is
forwarded to the one-partition index topic unchanged, with its origin (input topic, partition,
offset, timestamp) and its encoded signature in headers; the single decide stage then only looks
up bands, verifies, and updates the clusters.

Offsets. The group's offsets are committed only for records whose forward the broker has
acknowledged (after each fetch, and when partitions are revoked by a rebalance), so a worker that
dies or loses partitions is followed by one that forwards again from the last committed offset:
records are forwarded at least once and in input order per partition, and the decide stage
drops every record whose origin offset it has already decided. Signatures carry a fingerprint of
the parameters; when the decide stage runs with other parameters (e.g. taken from its state), it
signs the record itself: the result never depends on which stage signed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from aiokafka import TopicPartition  # type: ignore[import-untyped]
from aiokafka.abc import ConsumerRebalanceListener  # type: ignore[import-untyped]
from aiokafka.errors import CommitFailedError, KafkaError  # type: ignore[import-untyped]

from stream_dedupe.core.records import Document, parse_document
from stream_dedupe.core.signer import Signer
from stream_dedupe.worker.metrics import WorkerMetrics
from stream_dedupe.worker.settings import WorkerSettings
from stream_dedupe.worker.store import send_batches

log = logging.getLogger("stream_dedupe.worker.sign")

#: Header of a forwarded record holding its encoded :class:`~stream_dedupe.core.signer.Signed`.
SIGNED_HEADER = "sd-signed"
#: Fetch wait of every consumer of the worker (its stages', and Faust's, see ``app._cap_fetch_wait``).
#: Faust 0.15 hard-codes the consumer's fetch_max_wait_ms=1500. A fetch parked on an empty
#: partition delayed the next fetch by up to 1.5 s, stalling the pipeline about once a second
#: (1,250 vs 700 docs/s measured with 20 ms).
FETCH_MAX_WAIT_MS = 20


class _CommitOnRevoke(ConsumerRebalanceListener):  # type: ignore[misc]
    """Commits what was forwarded before a rebalance hands partitions to another worker."""

    def __init__(self, stage: SignStage) -> None:
        self.stage = stage

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        await self.stage.flush()
        self.stage.positions.clear()

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        parts = sorted(tp.partition for tp in assigned)
        log.info("sign stage: input partitions %s assigned to this worker", parts)
        self.stage.joined = True


class SignStage:
    """The sign stage of one worker.

    Args:
        settings: Worker settings (input and index topics, group id from ``app_id``, batch size).
        producer: A started aiokafka producer (the stage's own, never transactional).
        metrics: The worker's metrics (records forwarded).
        signer: Signs with the parameters the workers are configured with (from the unstripped
            text: with learned boilerplate the decide stage signs again only the documents a
            learned line is stripped from); None forwards unsigned records.

    """

    def __init__(self, settings: WorkerSettings, producer: Any, metrics: WorkerMetrics, signer: Signer | None) -> None:
        self.settings = settings
        self.metrics = metrics
        self.producer = producer
        self.signer = signer
        self.consumer: Any = None
        #: True once the sign group gave this worker an assignment (possibly empty).
        self.joined = False
        self.positions: dict[TopicPartition, int] = {}  # next offset to commit, forwards acknowledged
        self._in_flight: list[Any] = []
        self._pending: dict[TopicPartition, int] = {}
        self._lock = asyncio.Lock()

    @property
    def group_id(self) -> str:
        """The consumer group of the sign stages of all workers of an app."""
        return f"{self.settings.app_id}-sign"

    async def run(self) -> None:
        """Consume, sign and forward until cancelled."""
        from aiokafka import AIOKafkaConsumer

        s = self.settings
        self.consumer = consumer = AIOKafkaConsumer(
            bootstrap_servers=s.bootstrap,
            group_id=self.group_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=FETCH_MAX_WAIT_MS,
            max_partition_fetch_bytes=8 << 20,
            fetch_max_bytes=32 << 20,
            session_timeout_ms=int(s.session_timeout * 1000),
            heartbeat_interval_ms=int(s.heartbeat_interval * 1000),
            max_poll_interval_ms=300_000,
            client_id=f"{s.app_id}-sign", **s.kafka_security(),
        )
        await consumer.start()
        try:
            consumer.subscribe([s.input_topic], listener=_CommitOnRevoke(self))
            while True:
                fetched = await consumer.getmany(timeout_ms=1000, max_records=4 * s.batch_size)
                if fetched:
                    await self._forward(fetched)
        finally:
            with contextlib.suppress(Exception):
                await self.flush()
            with contextlib.suppress(Exception):
                await consumer.stop()

    async def _forward(self, fetched: dict[TopicPartition, list[Any]]) -> None:
        records: list[tuple[bytes | None, bytes | None]] = []
        headers: list[list[tuple[str, bytes]]] = []
        now_ms = int(time.time() * 1000)
        docs: list[tuple[int, Document]] = []
        last: dict[TopicPartition, int] = {}
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
                elif self.signer is not None:
                    parsed = parse_document(value, self.settings.max_doc_bytes)
                    if isinstance(parsed, Document):
                        docs.append((len(records), parsed))
                records.append((m.key, value))
                headers.append(h)
            if messages:
                last[tp] = messages[-1].offset + 1
        if docs and self.signer is not None:
            signer = self.signer
            for (row, _), signed in zip(docs, signer.sign([d.text for _, d in docs]), strict=True):
                headers[row].append((SIGNED_HEADER, signer.encode(signed)))
        sent = await send_batches(self.producer, self.settings.index_topic, 0, records, headers)
        async with self._lock:
            await self._settle()  # the previous fetch's forwards: acked, then committed
            self._in_flight = [future for future, _ in sent]
            self._pending = last
        self.metrics.forwarded.inc(len(records))

    async def _settle(self) -> None:
        for future in self._in_flight:
            await future
        self._in_flight = []
        if not self._pending:
            return
        self.positions.update(self._pending)
        self._pending = {}
        await self._commit()

    async def _commit(self) -> None:
        owned = set(self.consumer.assignment()) if self.consumer is not None else set()
        offsets = {tp: pos for tp, pos in self.positions.items() if tp in owned}
        if not offsets:
            return
        try:
            await self.consumer.commit(offsets)
        except (CommitFailedError, KafkaError) as exc:
            # Safe: the next owner of these partitions forwards again from the last committed
            # offset; the decide stage drops what it has already decided.
            log.info("sign stage: offset commit skipped (%s); records may be forwarded twice", type(exc).__name__)

    async def flush(self) -> None:
        """Await the forwards in flight and commit their offsets (rebalance, shutdown)."""
        async with self._lock:
            await self._settle()

    def lag(self) -> dict[int, int]:
        """Records not yet signed per assigned input partition (high watermark - position)."""
        out: dict[int, int] = {}
        consumer = self.consumer
        if consumer is None:
            return out
        for tp in consumer.assignment():
            with contextlib.suppress(Exception):
                high, done = consumer.highwater(tp), self.positions.get(tp)
                if high is not None and done is not None:
                    out[tp.partition] = max(int(high) - done, 0)
        return out
