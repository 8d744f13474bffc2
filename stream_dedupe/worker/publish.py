"""The decide stage's outputs: events, deduped updates and dead letters, as whole producer batches.

``rt`` is the worker's :class:`~stream_dedupe.worker.pipeline.Runtime` (its producers, settings
and the partitions of each output topic, looked up once).
"""

from __future__ import annotations

import contextlib
from typing import Any

from stream_dedupe.worker.faults import fault_point
from stream_dedupe.worker.partition import default_partitions
from stream_dedupe.worker.produce import send_batches


async def _partitions(rt: Any, topic: str) -> list[int]:
    """The partitions of an output topic (looked up once a worker)."""
    parts: list[int] | None = rt.partitions.get(topic)
    if parts is None:
        parts = rt.partitions[topic] = sorted(await rt.producer.partitions_for(topic))
    return parts


async def publish_outputs(
    rt: Any, outputs: list[tuple[str, bytes | None, bytes | None, Any]], producer: Any = None
) -> list[Any]:
    """Send ``(topic, key, value, headers)`` records as whole producer batches, one per partition.

    Partitions are chosen as ``producer.send`` does (aiokafka's default partitioner: murmur2 of
    the key, here for the whole batch at once: :mod:`~stream_dedupe.worker.partition`), so keys
    land where they always did; order is kept within each partition.
    """
    grouped: dict[tuple[str, int], tuple[list[tuple[bytes | None, bytes | None]], list[Any]]] = {}
    for topic in dict.fromkeys(output[0] for output in outputs):
        rows = [output for output in outputs if output[0] == topic]
        chosen = default_partitions([key for _, key, _, _ in rows], await _partitions(rt, topic))
        for (_, key, value, headers), partition in zip(rows, chosen, strict=True):
            records, hs = grouped.setdefault((topic, partition), ([], []))
            records.append((key, value))
            hs.append(headers)
    futures: list[Any] = []
    for (topic, partition), (records, hs) in grouped.items():
        futures.extend(f for f, _ in await send_batches(producer or rt.producer, topic, partition, records, hs))
    return futures


async def publish_transaction(rt: Any, outputs: list[Any], last_index: int) -> None:
    """exactly_once: publish the outputs and the index position in one Kafka transaction.

    The position is committed as the decide group's offset on the index topic, so after a crash
    the records up to it are known to be published (see :data:`~stream_dedupe.worker.pipeline.Runtime.replay_until`).
    """
    from aiokafka import TopicPartition  # type: ignore[import-untyped]

    producer, s = rt.txn_producer, rt.settings
    await producer.begin_transaction()
    try:
        for future in await publish_outputs(rt, outputs, producer):
            await future
        await producer.send_offsets_to_transaction({TopicPartition(s.index_topic, 0): last_index + 1}, s.decide_group)
        fault_point("before-commit")
        await producer.commit_transaction()
    except BaseException:  # cancelled, or an error: the next attempt starts a new transaction
        with contextlib.suppress(Exception):
            await producer.abort_transaction()
        raise
