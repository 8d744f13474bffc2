"""When the decided position is committed for lag exporters (the broker side: test_worker_group_lag)."""

from __future__ import annotations

import asyncio
from typing import Any

from stream_dedupe.worker.decided_offsets import DecidedOffsets


class RecordingConsumer:
    """Records commits; ``fail`` makes the next commits raise as a broker outage would."""

    def __init__(self) -> None:
        self.commits: list[int] = []
        self.fail = False

    async def commit(self, offsets: dict[Any, int]) -> None:
        await asyncio.sleep(0)
        if self.fail:
            raise ConnectionError("broker down")
        self.commits.extend(offsets.values())


def test_commits_only_what_is_durable_at_most_once_an_interval() -> None:
    async def main() -> None:
        consumer = RecordingConsumer()
        offsets = DecidedOffsets(consumer, "index-0", interval=3600)
        loop = asyncio.get_running_loop()

        pending: asyncio.Future[None] = loop.create_future()
        offsets.settled(pending, 500)
        offsets.tick()  # the batch's changelog is not acknowledged yet: nothing to report
        await asyncio.sleep(0.01)
        assert consumer.commits == []

        failed: asyncio.Future[None] = loop.create_future()
        offsets.settled(failed, 900)
        failed.set_exception(OSError("changelog send failed"))  # never durable: never reported
        pending.set_result(None)
        await asyncio.sleep(0)
        offsets.tick()
        await asyncio.sleep(0.01)
        assert consumer.commits == [500] and offsets.committed == 500

        later: asyncio.Future[None] = loop.create_future()
        offsets.settled(later, 1000)
        later.set_result(None)
        await asyncio.sleep(0)
        offsets.tick()  # within the interval: held back ...
        await asyncio.sleep(0.01)
        assert consumer.commits == [500]
        await offsets.flush()  # ... until the decider stops
        assert consumer.commits == [500, 1000]

    asyncio.run(main())


def test_a_failed_commit_is_retried_with_the_next() -> None:
    async def main() -> None:
        consumer = RecordingConsumer()
        offsets = DecidedOffsets(consumer, "index-0", interval=0)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        offsets.settled(done, 42)
        done.set_result(None)
        await asyncio.sleep(0)
        consumer.fail = True
        offsets.tick()
        await asyncio.sleep(0.01)
        assert consumer.commits == [] and offsets.committed == -1
        consumer.fail = False
        offsets.tick()
        await asyncio.sleep(0.01)
        assert consumer.commits == [42] and offsets.committed == 42

    asyncio.run(main())
