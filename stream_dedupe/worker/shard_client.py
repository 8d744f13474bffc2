"""The decider's side of the index shards on Kafka: a :class:`~stream_dedupe.core.sharding.gather.ShardClient`.

The engine calls its store synchronously, so with index shards the decider runs the engine in a
worker thread and :class:`KafkaShards` bridges each call to the event loop: the call's records
go to the shard's partition of ``<app>-shard-requests`` and the thread waits for the answers,
which the loop's reader task takes from ``<app>-shard-replies``. Reads go to every shard (band
buckets) or to the keys' owners (signatures, shingle sets) at once, one round per call.

A commit is sent (and acknowledged by the broker) before any later call, so a shard reads it
first; every read carries the commit number the decider expects the shard to hold, and a shard
that holds another answers ``BEHIND`` (it is taking over and restoring): such answers and a shard
that does not answer within ``--shard-timeout`` raise :class:`ShardUnavailable`, a timeout, which
the decide stage waits out and retries, never blaming a record.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import struct
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any

import numpy as np

from stream_dedupe.core.sharding.gather import merge_members, owner
from stream_dedupe.core.sharding.ops import ShardOps
from stream_dedupe.errors import StreamDedupeError
from stream_dedupe.worker import shard_wire as wire
from stream_dedupe.worker.produce import send_batches
from stream_dedupe.worker.settings import WorkerSettings

log = logging.getLogger("stream_dedupe.worker.shard")


class ShardUnavailable(TimeoutError):
    """A shard did not answer in time, or is not yet where the decider is (a takeover): retried."""


class ShardError(StreamDedupeError):
    """A shard failed a call; the message is the shard's."""


class KafkaShards:
    """The index shards, reached over Kafka (see the module docstring).

    Args:
        settings: The worker's settings (topics, shard count, timeout).
        producer: The decider's started producer.
        new_consumer: Builds an unassigned consumer (the pipeline's ``_new_consumer``).

    """

    def __init__(self, settings: WorkerSettings, producer: Any, new_consumer: Any, metrics: Any = None) -> None:
        self.settings, self.producer, self.new_consumer, self.metrics = settings, producer, new_consumer, metrics
        self.shards = settings.index_shards
        self.loop: asyncio.AbstractEventLoop | None = None
        self._waiting: dict[tuple[int, int], concurrent.futures.Future[tuple[int, bytes]]] = {}
        self._lock = threading.Lock()
        self._next = int.from_bytes(os.urandom(4), "little") << 24  # ids of this decider's calls
        self._applied = [0] * self.shards
        self._reader: asyncio.Task[None] | None = None
        self._consumer: Any = None
        self._paused: str | None = None
        self.calls = 0
        #: Awaited before a commit goes to the shards: the decider's own state on the broker first
        #: (its changelog), so that a successor never restores a state older than its shards'.
        self.before_apply: Callable[[], Awaitable[None]] | None = None

    async def start(self) -> None:
        """Start reading answers (from the end of the replies topic: older ones are not ours)."""
        from aiokafka import TopicPartition  # type: ignore[import-untyped]

        self.loop = asyncio.get_running_loop()
        self._consumer = self.new_consumer(self.settings, "shard-replies")
        await self._consumer.start()
        tp = TopicPartition(self.settings.shard_replies_topic, 0)
        self._consumer.assign([tp])
        await self._consumer.seek_to_end(tp)
        await self._consumer.position(tp)
        self._reader = asyncio.ensure_future(self._read(tp))

    async def stop(self) -> None:
        """Stop reading answers; calls still waiting fail as unavailable."""
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)
            self._reader = None
        if self._consumer is not None:
            await self._consumer.stop()
            self._consumer = None
        with self._lock:
            waiting, self._waiting = self._waiting, {}
        for future in waiting.values():
            future.set_exception(ShardUnavailable("the decider stopped reading shard answers"))

    def pause(self, reason: str) -> None:
        """Fail every waiting call and every new one as unavailable, until :meth:`resume` (a rebalance).

        A batch waiting for a shard would otherwise hold the decide lock, and the rebalance that
        moves the shard waits for that lock.
        """
        self._paused = reason
        with self._lock:
            waiting, self._waiting = self._waiting, {}
        for future in waiting.values():
            if not future.done():
                future.set_exception(ShardUnavailable(f"shard calls are paused: {reason}"))

    def resume(self) -> None:
        """Take calls again (the rebalance is over)."""
        self._paused = None

    async def _read(self, tp: Any) -> None:
        assembler = wire.Assembler()
        while True:
            fetched = await self._consumer.getmany(tp, timeout_ms=500, max_records=2048)
            for message in fetched.get(tp) or []:
                whole = assembler.add(message.value)
                if whole is None:
                    continue
                call, shard, method, payload = whole
                with self._lock:
                    future = self._waiting.pop((call, shard), None)
                if future is not None and not future.done():
                    future.set_result((method, payload))

    # -- bridging ---------------------------------------------------------------------------
    def _run(self, coro: Any) -> Any:
        loop = self.loop
        if loop is None:
            raise RuntimeError("KafkaShards.start() was not awaited")
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            raise RuntimeError("KafkaShards is called from its event loop: run the engine in a worker thread")
        return asyncio.run_coroutine_threadsafe(coro, loop).result()

    async def _send(self, shard: int, method: int, payload: bytes) -> None:
        records = wire.parts_of(self._call_id(), shard, method, payload)
        await self._send_records(shard, records)

    async def _send_records(self, shard: int, records: list[tuple[bytes, bytes]]) -> None:
        topic = self.settings.shard_requests_topic
        for future, _ in await send_batches(self.producer, topic, shard, records):
            await future  # acknowledged before any later call to the shard is sent

    def _call_id(self) -> int:
        with self._lock:
            self._next += 1
            return self._next

    def _ask(self, calls: dict[int, tuple[int, bytes]]) -> dict[int, bytes]:
        """Send one call to each shard of ``calls`` (shard -> (method, payload)); their answers."""
        started = time.monotonic()
        try:
            answers = self._round(calls)
        except ShardUnavailable:
            if self.metrics is not None:
                self.metrics.shard_unavailable.inc()
            raise
        if self.metrics is not None:
            self.metrics.shard_call_seconds.observe(time.monotonic() - started)
        return answers

    def _round(self, calls: dict[int, tuple[int, bytes]]) -> dict[int, bytes]:
        if self._paused is not None:
            raise ShardUnavailable(f"shard calls are paused: {self._paused}")
        self.calls += 1
        futures = {}
        sends = []
        for shard, (method, payload) in calls.items():
            call = self._call_id()
            future: concurrent.futures.Future[tuple[int, bytes]] = concurrent.futures.Future()
            with self._lock:
                self._waiting[(call, shard)] = future
            futures[shard] = (call, future)
            sends.append((shard, wire.parts_of(call, shard, method, payload)))

        async def send_all() -> None:
            await asyncio.gather(*(self._send_records(shard, records) for shard, records in sends))

        self._run(send_all())
        answers = {}
        timeout = self.settings.shard_timeout
        for shard, (_, future) in futures.items():
            try:
                method, payload = future.result(timeout=timeout)
            except ShardUnavailable:
                # failed by pause() or stop(): its own reason (TimeoutError, so before the clause below)
                self._forget(futures)
                raise
            except concurrent.futures.TimeoutError:  # the builtin TimeoutError: ShardUnavailable is one too
                self._forget(futures)
                raise ShardUnavailable(
                    f"index shard {shard} did not answer within {timeout:g} s (no worker holds it, its worker is "
                    "restoring its state, or that worker is not responding: paused or overloaded)"
                ) from None
            if method == wire.ERROR:
                message = payload.decode("utf-8", "replace")
                if message.startswith("RuntimeError: BEHIND"):
                    raise ShardUnavailable(f"index shard {shard} is not caught up yet ({message}): retried")
                raise ShardError(f"index shard {shard} failed: {message}")
            answers[shard] = payload
        return answers

    def _forget(self, futures: dict[int, tuple[int, Any]]) -> None:
        """Stop waiting for every call of a failed round (a late answer is then dropped)."""
        with self._lock:
            for shard, (call, _) in futures.items():
                self._waiting.pop((call, shard), None)

    # -- ShardClient ------------------------------------------------------------------------
    def configure(self, bands: int, rows: int) -> None:
        """Open every shard with the index's LSH shape; learn the commit each holds."""
        payload = struct.pack("<II", bands, rows)
        answers = self._ask({i: (wire.CONFIGURE, payload) for i in range(self.shards)})
        self._applied = [struct.unpack("<Q", answers[i])[0] for i in range(self.shards)]

    def applied(self) -> list[int]:
        """The last commit each shard holds (as of :meth:`configure` and the commits sent since)."""
        return list(self._applied)

    def apply(self, number: int, ops: Sequence[ShardOps]) -> None:
        """Send commit ``number`` to every shard; returns once the broker has every record."""

        async def send_all() -> None:
            if self.before_apply is not None:
                await self.before_apply()
            sends = [
                self._send(i, wire.APPLY, struct.pack("<Q", number) + shard_ops.encode())
                for i, shard_ops in enumerate(ops)
            ]
            await asyncio.gather(*sends)

        self._run(send_all())
        self._applied = [max(a, number) for a in self._applied]

    def _read_call(self, shard: int, method: int, body: bytes) -> tuple[int, bytes]:
        return method, struct.pack("<Q", self._applied[shard]) + body

    def members(self, bands: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, list[str]]:
        """See :class:`~stream_dedupe.core.sharding.gather.ShardClient`."""
        body = wire.pack_buckets(bands, keys)
        answers = self._ask({i: self._read_call(i, wire.MEMBERS, body) for i in range(self.shards)})
        return merge_members([wire.unpack_members(answers[i]) for i in range(self.shards)])

    def get_many(self, namespace: str, keys: Sequence[bytes]) -> list[bytes | None]:
        """See :class:`~stream_dedupe.core.sharding.gather.ShardClient`."""
        by_shard: dict[int, list[int]] = {}
        for i, key in enumerate(keys):
            by_shard.setdefault(owner(key, self.shards), []).append(i)
        if not by_shard:
            return []
        calls = {
            s: self._read_call(s, wire.GET_MANY, wire.pack_optional([namespace.encode(), *(keys[i] for i in pos)]))
            for s, pos in by_shard.items()
        }
        answers = self._ask(calls)
        out: list[bytes | None] = [None] * len(keys)
        for s, positions in by_shard.items():
            values, _ = wire.unpack_optional(answers[s])
            for i, value in zip(positions, values, strict=True):
                out[i] = value
        return out

    def items(self, namespace: str, shard: int) -> Iterator[tuple[bytes, bytes]]:
        """Not served over Kafka: the worker never scans a sharded namespace."""
        raise ShardError(f"scanning {namespace!r} of an index shard is not served over Kafka")

    def count(self, namespace: str) -> int:
        """Keys of a sharded namespace over every shard."""
        answers = self._ask({i: self._read_call(i, wire.COUNT, namespace.encode()) for i in range(self.shards)})
        return sum(struct.unpack("<Q", a)[0] for a in answers.values())

    def close(self) -> None:
        """Nothing to release here (:meth:`stop` stops the reader)."""
