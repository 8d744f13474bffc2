"""The index shards in a worker: which shards it serves, and the decider's store over them.

``--index-shards S`` (S >= 2, docs/sharding.md): every worker may hold some of the S partitions
of ``<app>-shard-requests`` (Faust's consumer group assigns them, with the same partitions of the
shard tables), and runs a :class:`~stream_dedupe.worker.shard_serve.ShardServer` for each once
Faust has recovered the tables; the decider (the worker holding the index partition) runs its
engine on a :class:`~stream_dedupe.core.sharding.gather.ShardedStore` over its own tables and a
:class:`~stream_dedupe.worker.shard_client.KafkaShards`, in a worker thread (the engine calls the
shards synchronously; the event loop carries the calls).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, TypeVar, cast

import faust

from stream_dedupe.core.sharding.gather import ShardedStore
from stream_dedupe.storage.base import KVStore
from stream_dedupe.worker import faust_compat
from stream_dedupe.worker.produce import start_worker_producer
from stream_dedupe.worker.shard_client import KafkaShards
from stream_dedupe.worker.shard_serve import SHARD_NAMESPACES, ShardServer
from stream_dedupe.worker.shard_standby import place_standbys, stop_standbys

log = logging.getLogger("stream_dedupe.worker.shard")
T = TypeVar("T")


def shard_tables(app: faust.App, shards: int) -> dict[str, Any]:
    """The shard tables (one partition a shard; none for 1 shard)."""
    if shards < 2:
        return {}
    return {
        ns: app.Table(
            f"shard-{ns}", default=None, key_type=bytes, value_type=bytes, partitions=shards, store="rocksdb://"
        )
        for ns in SHARD_NAMESPACES
    }


def owned_shards(app: faust.App, rt: Any) -> set[int]:
    """The shards Faust's consumer group assigns to this worker."""
    topic = rt.settings.shard_requests_topic
    return {tp.partition for tp in cast(Any, app.consumer).assignment() if tp.topic == topic}


def pause_shards(app: faust.App, rt: Any) -> None:
    """Stop Faust's consumer fetching the shard calls (each server reads its partition itself)."""
    consumer = cast(Any, app.consumer)
    topic = rt.settings.shard_requests_topic
    tps = [tp for tp in consumer.assignment() if tp.topic == topic and not faust_compat.is_paused(consumer, tp)]
    if tps:
        consumer.pause_partitions(tps)


async def steer_shards(app: faust.App, rt: Any, tables: dict[str, Any], settled: bool, new_consumer: Any) -> None:
    """Start a server for each shard assigned here (once recovered); stop those no longer assigned.

    With ``standby_replicas`` > 0 the worker also keeps the standby copies the group's placement
    gives it (:mod:`~stream_dedupe.worker.shard_standby`): a shard that moves to a worker with a
    copy recovers only the changelog records since the copy's last fetch.
    """
    if not tables:
        return
    owned = owned_shards(app, rt) if settled else set()
    for shard in [s for s in rt.shard_servers if s not in owned]:
        server = rt.shard_servers.pop(shard, None)  # a rebalance's stop_shards may have taken it meanwhile
        if server is not None:
            await server.stop()
    rt.metrics.shards_served.set(len(rt.shard_servers))
    if owned and not app.rebalancing:
        pause_shards(app, rt)
        if rt.shard_producer is None:
            rt.shard_producer = await start_worker_producer(rt.settings, "shard")
        if app.rebalancing:  # a rebalance began while the producer started: its end steers again
            return
        for shard in sorted(owned - set(rt.shard_servers)):
            server = ShardServer(rt.settings, shard, tables, rt.shard_producer, new_consumer, rt.metrics)
            rt.shard_servers[shard] = server
            server.start()
            log.info("serving index shard %d", shard)
        rt.metrics.shards_served.set(len(rt.shard_servers))
    if settled and rt.settings.standby_replicas > 0:
        await place_standbys(app, rt, tables)


async def stop_shards(rt: Any) -> None:
    """Stop every shard server and the standby copy (a rebalance: Faust may move the shards)."""
    await stop_standbys(rt)
    servers, rt.shard_servers = rt.shard_servers, {}
    for server in servers.values():
        await server.stop()
    rt.metrics.shards_served.set(0)


async def engine_store(rt: Any, new_consumer: Any) -> KVStore:
    """The store the decider's engine runs on: its tables, with the shards when there are any."""
    if rt.settings.index_shards < 2:
        return cast(KVStore, rt.store)
    if rt.producer is None:
        rt.producer = await start_worker_producer(rt.settings, "decide")
    if rt.shard_client is None:
        rt.shard_client = KafkaShards(rt.settings, rt.producer, new_consumer, rt.metrics)
        # A commit's gather part (its outbox) reaches the changelog before the shards apply it: a
        # decider frozen in between and replaced left the shards ahead of every successor's state.
        rt.shard_client.before_apply = lambda: rt.store.settle(rt.producer)
        await rt.shard_client.start()
    return ShardedStore(rt.store, rt.shard_client)


async def call_engine(rt: Any, fn: Callable[..., T], *args: Any) -> T:
    """Run an engine call: inline, or in a worker thread when the engine calls shards."""
    if rt.settings.index_shards < 2:
        return fn(*args)
    return await asyncio.to_thread(fn, *args)
