"""The decide stage's position, committed to Kafka for lag exporters (at_least_once).

The decide stage reads the index topic from the position in its state, never from a committed
offset (:mod:`~stream_dedupe.worker.pipeline`). So, before this module, Kafka knew nothing of how
far the decider was: ``kafka-consumer-groups.sh``, kafka-lag-exporter, Burrow or a KEDA Kafka
scaler saw the sign stage's group at lag 0 while thousands of signed records waited for a
decision, and only the worker's own ``stream_dedupe_consumer_lag`` showed them.

:class:`DecidedOffsets` commits the offset after the last decided index record as the offset of
the ``<app_id>-decide`` group on ``<app_id>-index`` partition 0: the same group and the same
meaning as the offset an ``exactly_once`` transaction commits (there the transaction does it).
It is a report, never read back by ``at_least_once``, and it is committed only once the batch's
state is durable (its changelog acknowledged), so it never runs ahead of the state: switching
to ``exactly_once``, which does read it, re-decides nothing wrongly. At most one commit a second
is sent and none is awaited on the decide path; a failed commit (broker outage, coordinator
moving) is retried with the next one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

log = logging.getLogger("stream_dedupe.worker")

#: Seconds between two commits (the lag a dashboard shows is at most this much older than the state).
COMMIT_INTERVAL_S = 1.0


class DecidedOffsets:
    """Commits the decided position of one index partition through a consumer of the decide group.

    Args:
        consumer: A started aiokafka consumer with ``group_id`` set to the decide group and the
            index partition assigned (the decide stage's own consumer).
        tp: The index partition.
        interval: Seconds between two commits.

    """

    def __init__(self, consumer: Any, tp: Any, interval: float = COMMIT_INTERVAL_S) -> None:
        self.consumer = consumer
        self.tp = tp
        self.interval = interval
        #: Offset after the last index record whose state is durable (-1: none yet).
        self.durable = -1
        #: The offset last committed successfully (-1: none).
        self.committed = -1
        self._sent_at = float("-inf")
        self._task: asyncio.Task[None] | None = None

    def settled(self, future: asyncio.Future[Any], next_offset: int) -> None:
        """Mark ``next_offset`` durable once ``future`` (the batch's changelog acks) succeeds."""

        def done(f: asyncio.Future[Any]) -> None:
            if not f.cancelled() and f.exception() is None:
                self.durable = max(self.durable, next_offset)

        future.add_done_callback(done)

    def tick(self) -> None:
        """Send a commit of the durable offset if it moved and the last one is a second old.

        Called by the decide loop after every batch and every empty fetch; never waits.
        """
        if self.durable <= self.committed or (self._task is not None and not self._task.done()):
            return
        now = time.monotonic()
        if now - self._sent_at < self.interval:
            return
        self._sent_at = now
        self._task = asyncio.ensure_future(self._commit(self.durable))

    async def flush(self, timeout: float = 2.0) -> None:
        """Commit the durable offset now (a decider stopping); gives up silently after ``timeout``."""
        if self._task is not None and not self._task.done():
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(asyncio.shield(self._task), timeout)
        if self.durable > self.committed:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(self._commit(self.durable), timeout)

    async def _commit(self, offset: int) -> None:
        try:
            await self.consumer.commit({self.tp: offset})
        except Exception as exc:  # reported, retried with the next commit; the state is unaffected
            log.info("could not commit the decided offset %d of %s: %r (retried)", offset, self.tp, exc)
            return
        self.committed = max(self.committed, offset)
