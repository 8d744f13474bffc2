"""Bulk copies of the state from the changelogs: at start-up, and as standby replicas.

Faust restores a table by passing every changelog record through its per-event consumer path
(~7,000 records/s measured on this 2-core machine, about ten records per document), and its
standby replicas use the same path, so a standby falls far behind a decider working at full speed
(measured: a takeover after kill -9 at 100k documents took 123 s with a Faust standby, 152 s
without). The same copy done here - one plain consumer over the state's changelog topics,
``getmany`` of thousands of records, one RocksDB ``WriteBatch`` per table and fetch - writes the
tables' local RocksDB stores exactly as Faust's recovery would (same files, same persisted-offset
key, via the tables' own stores), so Faust's recovery then only reads what is left.

* :func:`catch_up` at start-up, before the worker joins the group: a restarted worker, or one
  whose disk was lost, reads the changelogs up to their end.
* :class:`Follower` on a worker that does not decide, with ``standby_replicas`` > 0: keeps the
  local tables within a fetch of the changelogs, and stops before any rebalance (Faust's recovery
  and the decide stage are then the only writers).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from stream_dedupe.worker import faust_compat
from stream_dedupe.worker.errors import WorkerConfigError
from stream_dedupe.worker.settings import WorkerSettings

log = logging.getLogger("stream_dedupe.worker.follow")

_FETCH_RECORDS = 20_000


class _Tables:
    """The tables' changelog partitions and local stores (partition 0 of each, or the given ones)."""

    def __init__(self, tables: Mapping[str, Any], partitions: Sequence[int] = (0,)) -> None:
        from aiokafka import TopicPartition  # type: ignore[import-untyped]

        self.tables, self.partitions = tables, tuple(partitions)
        self.by_tp = {
            TopicPartition(t.changelog_topic_name, p): (t, p) for t in tables.values() for p in self.partitions
        }

    def existing(self, topics: set[str]) -> _Tables:
        """The tables whose changelog topic exists (a new app: Faust creates them at start)."""
        kept = {ns: t for ns, t in self.tables.items() if t.changelog_topic_name in topics}
        return _Tables(kept, self.partitions)

    def persisted(self, tp: Any) -> int | None:
        table, partition = self.by_tp[tp]
        return faust_compat.persisted_offset(table, tp.topic, partition)

    def apply(self, tp: Any, messages: list[Any]) -> None:
        """Write a fetch of one changelog partition (one WriteBatch), then its persisted offset."""
        from rocksdict import WriteBatch

        table, partition = self.by_tp[tp]
        batch = WriteBatch(raw_mode=True)
        for m in messages:
            if m.value is None:
                batch.delete(m.key)
            else:
                batch.put(m.key, m.value)
        faust_compat.table_db(table, partition).write(batch)  # the handle Faust and the stages use
        faust_compat.set_persisted_offset(table, tp.topic, partition, messages[-1].offset)


async def _consumer(settings: WorkerSettings, all_tables: _Tables, name: str) -> tuple[Any, _Tables]:
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_bytes=64 << 20,
        max_partition_fetch_bytes=16 << 20,
        fetch_max_wait_ms=100,
        client_id=f"{settings.app_id}-{name}",
        **settings.kafka_security(),
    )
    await consumer.start()
    tables = all_tables.existing(set(await consumer.topics()))
    tps = list(tables.by_tp)
    if not tps:
        return consumer, tables
    consumer.assign(tps)
    for tp in tps:
        persisted = tables.persisted(tp)
        if persisted is None:
            await consumer.seek_to_beginning(tp)
        else:
            consumer.seek(tp, persisted + 1)
    return consumer, tables


async def _copy(consumer: Any, tables: _Tables, until_end: bool, stop: asyncio.Event | None) -> int:
    """Apply fetches until the end offsets (``until_end``) or until ``stop`` is set; records applied."""
    tps = list(tables.by_tp)
    if not tps:
        return 0
    ends = await consumer.end_offsets(tps) if until_end else {}
    applied = 0
    while stop is None or not stop.is_set():
        if until_end:
            positions = {tp: await consumer.position(tp) for tp in tps}
            if all(positions[tp] >= ends[tp] for tp in tps):
                return applied
        fetched = await consumer.getmany(timeout_ms=200, max_records=_FETCH_RECORDS)
        for tp, messages in fetched.items():
            if messages:
                tables.apply(tp, messages)
                applied += len(messages)
        await asyncio.sleep(0)
    return applied


async def catch_up(settings: WorkerSettings, tables: Mapping[str, Any]) -> int:
    """Copy every changelog record after the local persisted offsets into the local tables.

    Returns:
        Records applied.

    """
    started = time.monotonic()
    consumer, view = await _consumer(settings, _Tables(tables), "restore")
    try:
        await _check_ahead(consumer, view, settings)
        applied = await _copy(consumer, view, until_end=True, stop=None)
    finally:
        await consumer.stop()
    if applied:
        log.info("state copied from the changelogs: %d records in %.1fs", applied, time.monotonic() - started)
    return applied


async def _check_ahead(consumer: Any, tables: _Tables, settings: WorkerSettings) -> None:
    """Refuse a local state that holds more of a changelog than the topic does.

    That is a state directory kept while the Kafka cluster lost its data (a new or wiped broker),
    or one of another cluster. Faust's recovery crashed on it with a traceback
    (``ConsistencyError``); this says what happened and what to do, before anything is changed.

    Raises:
        WorkerConfigError: with the state directory, the topic and the two offsets.

    """
    tps = list(tables.by_tp)
    ends = await consumer.end_offsets(tps) if tps else {}
    for tp in tps:
        persisted = tables.persisted(tp)
        if persisted is not None and persisted >= ends[tp]:
            raise WorkerConfigError(
                f"the local state in {settings.state_dir} holds {tp.topic} up to offset {persisted}, but that "
                f"changelog topic ends at offset {ends[tp]} on {settings.bootstrap}: the Kafka cluster lost its data "
                "(a new or wiped broker) or the state directory belongs to another cluster or app. Point --broker "
                "at the cluster it belongs to; or, to start this app afresh here, move the state directory away "
                "(the documents it holds are then forgotten: dedupe starts from an empty state)"
            )


class Follower:
    """A standby copy of the state, kept by a worker that does not decide.

    Args:
        settings: Worker settings.
        tables: The worker's Faust tables, by namespace.
        partitions: The tables' partitions to follow (index shards this worker does not serve).

    """

    def __init__(self, settings: WorkerSettings, tables: Mapping[str, Any], partitions: Sequence[int] = (0,)) -> None:
        self.settings = settings
        self.tables = _Tables(tables, partitions)
        self.following = self.tables
        self._stop = asyncio.Event()
        self._task: asyncio.Task[int] | None = None
        self.consumer: Any = None

    @property
    def running(self) -> bool:
        """True while the copy runs."""
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        """Start following the changelogs (no-op if running)."""
        if self.running:
            return
        self._stop = asyncio.Event()
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> int:
        self.consumer, self.following = await _consumer(self.settings, self.tables, "standby")
        try:
            return await _copy(self.consumer, self.following, until_end=False, stop=self._stop)
        finally:
            with contextlib.suppress(Exception):
                await self.consumer.stop()
            self.consumer = None

    async def stop(self) -> None:
        """Stop after the fetch being applied (before a rebalance lets anyone else write)."""
        task = self._task
        if task is None:
            return
        self._stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 30)
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        self._task = None

    def lag(self) -> int | None:
        """Changelog records not applied yet (None when not following)."""
        consumer = self.consumer
        if consumer is None:
            return None
        total = 0
        for tp in self.following.by_tp:
            with contextlib.suppress(Exception):
                high = consumer.highwater(tp)
                persisted = self.following.persisted(tp)
                if high is not None:
                    total += max(int(high) - (-1 if persisted is None else persisted) - 1, 0)
        return total
