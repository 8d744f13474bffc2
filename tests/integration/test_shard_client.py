"""The decider's shard client on the real broker, with no shard served: why a call failed is what it says.

A rebalance pauses the client (``KafkaShards.pause``), which fails the waiting call at once with
its reason. ``ShardUnavailable`` is a ``TimeoutError``, which ``concurrent.futures.TimeoutError``
is too, so the timeout clause used to catch it and report "did not answer within 60 s" for a call
cancelled after a second. The timeout itself must still say so after ``--shard-timeout``.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic  # type: ignore[import-untyped]

from stream_dedupe.worker.pipeline import _new_consumer
from stream_dedupe.worker.produce import start_worker_producer
from stream_dedupe.worker.settings import WorkerSettings
from stream_dedupe.worker.shard_client import KafkaShards, ShardUnavailable
from tests.integration.conftest import Broker


async def _client(broker: Broker, timeout: float) -> tuple[KafkaShards, object]:
    settings = WorkerSettings(
        broker=broker.bootstrap,
        app_id=f"t{uuid.uuid4().hex[:10]}-app",
        index_shards=2,
        shard_timeout=timeout,
        replication_factor=1,
    )
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
    await admin.start()
    try:
        await admin.create_topics(
            [
                NewTopic(settings.shard_requests_topic, num_partitions=2, replication_factor=1),
                NewTopic(settings.shard_replies_topic, num_partitions=1, replication_factor=1),
            ]
        )
    finally:
        await admin.close()
    producer = await start_worker_producer(settings, "decide")
    shards = KafkaShards(settings, producer, _new_consumer)
    await shards.start()
    return shards, producer


async def _call_in_thread(shards: KafkaShards, pause_after: float | None) -> tuple[str, float]:
    """Call ``configure`` (no shard answers) from a thread, as the engine does; its error and seconds."""
    loop = asyncio.get_running_loop()
    started = time.monotonic()
    call = loop.run_in_executor(None, shards.configure, 18, 7)
    if pause_after is not None:
        await asyncio.sleep(pause_after)
        shards.pause("partitions revoked")
    with pytest.raises(ShardUnavailable) as raised:
        await call
    return str(raised.value), time.monotonic() - started


def test_a_paused_call_says_it_was_paused_not_that_it_timed_out(broker: Broker) -> None:
    async def run() -> None:
        shards, producer = await _client(broker, timeout=60)
        try:
            message, seconds = await _call_in_thread(shards, pause_after=1.0)
            assert "paused: partitions revoked" in message, message
            assert "did not answer" not in message, message
            assert seconds < 30, seconds  # failed by the pause, not by the 60 s timeout
            # and while paused, a new call fails at once with the same reason
            shards_message, _ = await _call_in_thread(shards, pause_after=None)
            assert "paused: partitions revoked" in shards_message
            shards.resume()
            assert shards._waiting == {}  # the failed rounds wait for nothing
        finally:
            await shards.stop()
            await producer.stop()  # type: ignore[attr-defined]

    asyncio.run(run())


def test_a_shard_that_never_answers_times_out_with_the_timeout_in_the_message(broker: Broker) -> None:
    async def run() -> None:
        shards, producer = await _client(broker, timeout=2)
        try:
            message, seconds = await _call_in_thread(shards, pause_after=None)
            assert "did not answer within 2 s" in message, message
            assert seconds >= 2, seconds
            assert shards._waiting == {}
        finally:
            await shards.stop()
            await producer.stop()  # type: ignore[attr-defined]

    asyncio.run(run())
