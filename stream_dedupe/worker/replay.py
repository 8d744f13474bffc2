"""exactly_once: which index records were published by a transaction whose state was not written.

Each batch publishes its outputs and commits ``<app_id>-decide``'s offset on the index topic in
one Kafka transaction, then writes the state. After a crash between the two, the records below
the committed offset and after the state's position are decided again *without* publishing
(:data:`~stream_dedupe.worker.pipeline.Runtime.replay_until`). That gap is at most one batch; an
offset further ahead was moved by hand (``kafka-consumer-groups.sh --reset-offsets --to-latest``
on a lagging group), and trusting it would decide those records without ever publishing their
events (an outside walk-through lost 958 documents that way): it is ignored, loudly.
"""

from __future__ import annotations

import logging

from stream_dedupe.worker.settings import WorkerSettings

log = logging.getLogger("stream_dedupe.worker")


async def published_until(settings: WorkerSettings) -> int:
    """exactly_once: the decide group's committed offset on the index topic (-1 if none)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition  # type: ignore[import-untyped]

    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.bootstrap,
        group_id=settings.decide_group,
        enable_auto_commit=False,
        client_id=f"{settings.app_id}-decide-offsets",
        **settings.kafka_security(),
    )
    await consumer.start()
    try:
        committed = await consumer.committed(TopicPartition(settings.index_topic, 0))
    finally:
        await consumer.stop()
    return -1 if committed is None else int(committed)


def plausible_replay(settings: WorkerSettings, committed: int, index_offset: int) -> int:
    """The committed offset if a crash can have left it there (at most one batch past the state), else -1.

    Args:
        settings: The worker's settings (the batch size, the group's and topic's names).
        committed: The decide group's committed offset (-1: none).
        index_offset: The last index offset the state holds as decided (-1: none).

    """
    if committed <= index_offset + 1 + settings.batch_size:
        return committed
    log.error(
        "the %s group's offset on %s is %d, more than one batch (%d) ahead of the state's position %d: it was "
        "moved by hand; ignoring it (the records after the state are decided and published). Never reset this "
        "group: the worker's position lives in its state",
        settings.decide_group,
        settings.index_topic,
        committed,
        settings.batch_size,
        index_offset + 1,
    )
    return -1
