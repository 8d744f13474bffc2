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
import hashlib
import logging
import time
from collections.abc import Callable
from typing import Any

from aiokafka import TopicPartition  # type: ignore[import-untyped]
from aiokafka.abc import ConsumerRebalanceListener  # type: ignore[import-untyped]
from aiokafka.errors import CommitFailedError, KafkaError  # type: ignore[import-untyped]

from stream_dedupe.core.records import Deletion, Document, ParseLimits, parse_keyed, peek_id
from stream_dedupe.core.signer import Signer
from stream_dedupe.worker.metrics import WorkerMetrics
from stream_dedupe.worker.poison import is_record_error, is_transient
from stream_dedupe.worker.produce import send_batches
from stream_dedupe.worker.settings import WorkerSettings
from stream_dedupe.worker.signing import Signing
from stream_dedupe.worker.sizes import TopicLimits, read_topic_limits, record_bytes

log = logging.getLogger("stream_dedupe.worker.sign")

#: Header of a forwarded record holding its encoded :class:`~stream_dedupe.core.signer.Signed`.
SIGNED_HEADER = "sd-signed"
#: Headers of a record the sign stage judged itself (too large to forward): its outcome, and the
#: size and SHA-256 of the original (the forwarded value is a prefix of it, for the dead letter).
INVALID_HEADER, DETAIL_HEADER, ID_HEADER = "sd-invalid", "sd-detail", "sd-id"
SIZE_HEADER, SHA_HEADER = "sd-size", "sd-sha256"

Forward = tuple[bytes | None, bytes | None]
#: Per document, True when it needs no signature (see ``SignStage``); None: no hint now.
UnchangedHint = Callable[[list[Document], set[str]], "list[bool] | None"]
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
        unchanged: On the worker that decides, per document of a fetch (and the ids the fetch
            deletes), True when the decider's committed state holds it as it is
            (:meth:`~stream_dedupe.core.engine.DedupeEngine.unchanged_recrawls`); None when no
            such hint can be taken now. Such an unchanged re-crawl is forwarded unsigned: the
            decide stage recognizes it without its signature, and signs it if it changed since.

    """

    def __init__(
        self,
        settings: WorkerSettings,
        producer: Any,
        metrics: WorkerMetrics,
        signer: Signer | None,
        unchanged: UnchangedHint | None = None,
    ) -> None:
        self.settings = settings
        self.metrics = metrics
        self.producer = producer
        self.signer = signer
        self.unchanged = unchanged
        self._hint_failed = False
        self.consumer: Any = None
        #: True once the sign group gave this worker an assignment (possibly empty).
        self.joined = False
        self.positions: dict[TopicPartition, int] = {}  # next offset to commit, forwards acknowledged
        self._in_flight: list[tuple[Any, list[Forward], list[list[tuple[str, bytes]]]]] = []
        self._pending: dict[TopicPartition, int] = {}
        self._lock = asyncio.Lock()
        self.sizes = TopicLimits()
        self.limits: ParseLimits = settings.parse_limits()
        self._bound = "max_doc_bytes"
        #: Signs the documents that need it: in ``--jobs`` processes, else in this one.
        self.signing = Signing(settings, signer, metrics) if signer is not None else None

    @property
    def group_id(self) -> str:
        """The consumer group of the sign stages of all workers of an app."""
        return f"{self.settings.app_id}-sign"

    async def run(self) -> None:
        """Consume, sign and forward until cancelled."""
        from aiokafka import AIOKafkaConsumer

        s = self.settings
        self.sizes = await read_topic_limits(s)
        limit, self._bound = self.sizes.doc_limit(s)
        self.limits = s.parse_limits(limit)
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
            client_id=f"{s.app_id}-sign",
            **s.kafka_security(),
        )
        if self.signing is not None:
            await self.signing.start()
        await consumer.start()
        try:
            consumer.subscribe([s.input_topic], listener=_CommitOnRevoke(self))
            while True:
                fetched = await consumer.getmany(timeout_ms=1000, max_records=4 * s.batch_size)
                if fetched:
                    await self._forward(fetched)
                else:
                    await self._idle(consumer)
        finally:
            with contextlib.suppress(Exception):
                await self.flush()
            with contextlib.suppress(Exception):
                await consumer.stop()
            if self.signing is not None:
                with contextlib.suppress(Exception):
                    await self.signing.stop()

    async def _forward(self, fetched: dict[TopicPartition, list[Any]]) -> None:
        records: list[Forward] = []
        headers: list[list[tuple[str, bytes]]] = []
        now_ms = int(time.time() * 1000)
        docs: list[tuple[int, Document]] = []
        deleted: set[str] = set()
        last: dict[TopicPartition, int] = {}
        limit, max_key = self.limits.max_doc_bytes, self.settings.max_id_bytes + 1
        for tp, messages in fetched.items():
            topic, partition = tp.topic.encode(), b"%d" % tp.partition
            for m in messages:
                ts = m.timestamp if m.timestamp and m.timestamp > 0 else now_ms
                h = [("sd-topic", topic), ("sd-partition", partition)]
                h += [("sd-offset", b"%d" % m.offset), ("sd-ts", b"%d" % ts)]
                key, value = m.key, m.value
                if key is not None and len(key) > max_key:  # judged here: the key is cut to forward it
                    detail = f"the Kafka key is {len(key)} bytes, over the limit of {max_key - 1} (max_id_bytes)"
                    value = self._judged(key[:max_key], value or b"", h, "id-too-long", detail)
                    key = key[:max_key]
                elif value is None:
                    h.append(("sd-deleted", b"1"))
                    value = b""
                    if key is not None:
                        deleted.add(key.decode("utf-8", "replace"))
                elif len(value) > limit:
                    detail = f"record is {len(value)} bytes, over the limit of {limit} ({self._bound})"
                    value = self._judged(key, value, h, "too-large", detail)
                elif self.signer is not None:
                    parsed = parse_keyed(key, value, self.limits)
                    if isinstance(parsed, Document):
                        docs.append((len(records), parsed))
                    elif isinstance(parsed, Deletion):  # {"id": ..., "deleted": true}
                        deleted.add(parsed.doc_id)
                records.append((key, value))
                headers.append(h)
            if messages:
                last[tp] = messages[-1].offset + 1
        if docs and self.signing is not None:
            docs = self._needing_signatures(docs, deleted)
            for (row, _), blob in zip(docs, await self.signing.signatures([d.text for _, d in docs]), strict=True):
                if blob is not None:
                    headers[row].append((SIGNED_HEADER, blob))
        index = self.settings.index_topic
        for row, (key, value) in enumerate(records):
            if not self.sizes.fits(index, key, value, headers[row]):
                # The signature (in exact mode the shingle set, ~1.5x the text) is only work saved:
                # forwarded without it, the decide stage signs the document itself.
                headers[row] = [h for h in headers[row] if h[0] != SIGNED_HEADER]
                if self.sizes.fits(index, key, value, headers[row]):
                    continue
                size = record_bytes(key, value, headers[row])
                detail = f"the record is {size} bytes with its key and headers, over max.message.bytes of {index}"
                records[row] = (key, self._judged(key, value or b"", headers[row], "too-large", detail))
        sent = await self._send(records, headers)
        async with self._lock:
            await self._settle()  # the previous fetch's forwards: acked, then committed
            self._in_flight = sent
            self._pending = last
        self.metrics.forwarded.inc(len(records))

    def _needing_signatures(self, docs: list[tuple[int, Document]], deleted: set[str]) -> list[tuple[int, Document]]:
        """``docs`` without the unchanged re-crawls the decider holds as they are (forwarded unsigned)."""
        hint = self.unchanged
        if hint is None:
            return docs
        try:
            unchanged = hint([d for _, d in docs], deleted)
        except Exception:
            # a hint only saves work: signing everything is always right
            if not self._hint_failed:
                log.warning("sign stage: reading the decider's records failed; signing every record", exc_info=True)
            self._hint_failed = True
            return docs
        self._hint_failed = False
        if not unchanged:
            return docs
        kept = [item for item, same in zip(docs, unchanged, strict=True) if not same]
        self.metrics.unsigned_recrawls.inc(len(docs) - len(kept))
        return kept

    def _judged(self, key: bytes | None, value: bytes, h: list[tuple[str, bytes]], reason: str, detail: str) -> bytes:
        """Judge a record here (it cannot be forwarded): outcome headers, and a prefix of the value."""
        doc_id = None if reason == "id-too-long" else key.decode("utf-8", "replace") if key else peek_id(value)
        h += [(INVALID_HEADER, reason.encode()), (DETAIL_HEADER, detail.encode())]
        h += [(SIZE_HEADER, b"%d" % len(value)), (SHA_HEADER, hashlib.sha256(value).hexdigest().encode())]
        if doc_id:
            h.append((ID_HEADER, doc_id[: self.settings.max_id_bytes + 1].encode()))
        keep = min(self.settings.dlq_max_payload_bytes, self.sizes.max_bytes(self.settings.index_topic) // 2)
        return value[:keep]

    async def _send(
        self, records: list[Forward], headers: list[list[tuple[str, bytes]]]
    ) -> list[tuple[Any, list[Forward], list[list[tuple[str, bytes]]]]]:
        index = self.settings.index_topic
        limit = self.sizes.max_bytes(index)
        out = []
        start = 0
        for future, count in await send_batches(self.producer, index, 0, records, headers, max_bytes=limit):
            out.append((future, records[start : start + count], headers[start : start + count]))
            start += count
        return out

    async def _settle(self) -> None:
        in_flight, self._in_flight = self._in_flight, []
        for future, records, headers in in_flight:
            await self._acked(future, records, headers)
        if not self._pending:
            return
        self.positions.update(self._pending)
        self._pending = {}
        await self._commit()

    async def _acked(self, future: Any, records: list[Forward], headers: list[list[tuple[str, bytes]]]) -> None:
        """Await one forwarded batch; a batch the broker refuses is forwarded again record by record.

        The poison-record policy of the sign stage: a record that the broker keeps refusing
        (``poison_retries`` times) is forwarded as judged (``unprocessable``, a prefix of its value).
        """
        attempt, judged = 0, False
        while True:
            try:
                await future
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if not (is_transient(exc) or is_record_error(exc)):
                    raise
                attempt += 0 if is_transient(exc) else 1
                log.warning("sign stage: %d forwards failed (%r), attempt %d", len(records), exc, attempt)
                if is_record_error(exc) and len(records) > 1:
                    for i in range(len(records)):
                        (one,) = await self._send(records[i : i + 1], headers[i : i + 1])
                        await self._acked(*one)
                    return
                if attempt >= self.settings.poison_retries:
                    if judged:
                        raise  # even the judged stand-in is refused: not the record's fault
                    judged = True
                    (key, value), h = records[0], [x for x in headers[0] if x[0] != SIGNED_HEADER]
                    detail = f"forwarding this record failed {attempt} times ({type(exc).__name__}: {str(exc)[:200]})"
                    records = [(key, self._judged(key, value or b"", h, "unprocessable", detail))]
                    headers = [h]
                    attempt = 0
                await asyncio.sleep(1.0 if is_transient(exc) else 0.2)
                ((future, records, headers),) = await self._send(records, headers)

    async def _idle(self, consumer: Any) -> None:
        """Nothing fetched for a second: settle and commit the last forwards, and know every partition.

        Forwards are otherwise settled when the next fetch is forwarded, so after a burst the last
        fetch's offsets stayed uncommitted (and the lag at its size) until more records came.
        A partition that had nothing to fetch since this worker got it has no position yet: its
        fetch position (where the group committed, nothing is in flight for it) stands in, so
        that its lag is exported too, as 0.
        """
        async with self._lock:
            await self._settle()
            for tp in consumer.assignment():
                if tp not in self.positions:
                    with contextlib.suppress(Exception):  # not fetched yet, or just revoked
                        self.positions[tp] = await consumer.position(tp)

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
