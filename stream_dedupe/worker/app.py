"""The Faust application of the worker: tables, recovery, web endpoints, and the pipeline's start.

::

    crawl.documents (N partitions) --sign (every worker)--> <app>-index (1 partition) --decide--> dedupe.events
                                                                             |-> crawl.documents.deduped
                                                                             |-> dedupe.dlq
                                             state: Faust tables (RocksDB) + changelog topics

Every worker runs the sign stage (:mod:`stream_dedupe.worker.sign`) over its share of the input
partitions. Faust provides the tables (one per state namespace, one partition, changelogged to
compacted topics), their recovery and standby replicas, the web server (``/metrics``,
``/healthz``, ``/readyz``) and the consumer group that assigns the index partition to exactly one
worker: that worker, once the tables are recovered, builds the engine (and warms it up) and runs
the decide stage (:mod:`stream_dedupe.worker.pipeline`) from the offsets stored in the state. A
worker that loses the index partition in a rebalance drops its engine and keeps signing. Per batch:
``engine.process``; publish events, deduped updates and DLQ records and await every
acknowledgement; then commit the state (journaled, :mod:`stream_dedupe.worker.store`) with the
decided offsets. A crash before the commit re-decides the batch to identical events; records
whose decision is already in the state are dropped by their origin offset.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, cast

import faust

from stream_dedupe.core.records import Document
from stream_dedupe.core.signer import Signer
from stream_dedupe.storage.base import NAMESPACES
from stream_dedupe.worker import faust_compat
from stream_dedupe.worker.engine_start import ensure_engine
from stream_dedupe.worker.follow import Follower
from stream_dedupe.worker.gauges import broker_status, refresh_gauges, update_broker_status
from stream_dedupe.worker.membership import lease_age, membership_fresh, replaced
from stream_dedupe.worker.memory import bound_tables
from stream_dedupe.worker.metrics import CONTENT_TYPE, WorkerMetrics
from stream_dedupe.worker.pipeline import (
    INDEX_OFFSET_KEY,
    Runtime,
    _new_consumer,
    close_gate,
    owns_index,
    pause_index,
    start_sign_stage,
    stop_decide,
    stop_pipeline,
    stop_sign_stage,
)
from stream_dedupe.worker.produce import start_worker_producer
from stream_dedupe.worker.retention import CHECK_EVERY_S, RetentionSweeper
from stream_dedupe.worker.settings import WorkerSettings
from stream_dedupe.worker.shard_stage import pause_shards, shard_tables, steer_shards, stop_shards
from stream_dedupe.worker.sign import FETCH_MAX_WAIT_MS, SignStage, UnchangedHint
from stream_dedupe.worker.store import FaustTableStore

log = logging.getLogger("stream_dedupe.worker")

#: The only paths the worker's HTTP server answers (every other one is 404).
WEB_PATHS = ("/metrics", "/healthz", "/readyz")


class _Synthetic:
    """A stand-in event of the index topic's partition 0, to build the engine before any record."""

    def __init__(self, topic: str) -> None:
        self.message = _SyntheticMessage(topic)


@dataclass
class _SyntheticMessage:
    topic: str
    partition: int = 0


@dataclass
class WorkerApp:
    """A worker's Faust app with its runtime (metrics, store, engine)."""

    app: faust.App
    runtime: Runtime
    tables: dict[str, Any]


#: Seconds Faust's consumer may go without fetching before aiokafka makes it leave the group
#: (``max_poll_interval``; Faust's default is 1,000 s). This worker reads the index and the shard
#: calls with consumers of its own and keeps those partitions paused in Faust's consumer, which
#: then fetches nothing at all (Faust polls only when a partition is active): with the default,
#: every worker left the group after ~17 minutes and, never fetching, did not join it again, so
#: the stream stopped. Liveness is the heartbeat (``--session-timeout``) and ``/healthz``.
MAIN_CONSUMER_MAX_POLL_INTERVAL = 1e9


def create_app(settings: WorkerSettings) -> WorkerApp:
    """Build the Faust app of a worker (topics, tables, agents, web views, timers)."""
    s = settings
    faust_compat.cap_fetch_wait(FETCH_MAX_WAIT_MS)
    faust_compat.throttle_metadata_retries()
    app = faust.App(
        s.app_id,
        broker=s.faust_broker,
        broker_credentials=s.faust_credentials(),
        datadir=str(s.state_dir),
        store="rocksdb://",
        autodiscover=False,
        topic_partitions=1,
        topic_replication_factor=s.replication_factor,
        # Standby copies are kept by this worker's own Follower (stream_dedupe.worker.follow):
        # Faust's per-event standby path fell far behind a decider working at full speed.
        table_standby_replicas=0,
        # Faust's own transactions stay off: with exactly_once the decide stage publishes in
        # transactions of its own (stream_dedupe.worker.pipeline); the tables are written as before.
        processing_guarantee="at_least_once",
        consumer_auto_offset_reset="earliest",
        web_enabled=True,
        # Only /metrics, /healthz and /readyz: Faust's /table/ and /router/ views would serve the stored
        # documents and the cluster's topology to anyone who reaches the port (docs/worker.md, "Security").
        **faust_compat.WEB_SETTINGS,
        web_port=s.web_port,
        web_bind=s.web_host,
        web_host=s.web_host,
        topic_disable_leader=True,
        broker_session_timeout=s.session_timeout,
        broker_heartbeat_interval=s.heartbeat_interval,
        broker_max_poll_interval=MAIN_CONSUMER_MAX_POLL_INTERVAL,
        stream_buffer_maxsize=max(4096, 4 * s.batch_size),
    )
    # acks=False: Faust's stream never processes the index (the decide task reads it with its own
    # consumer, positions come from the state), so its monitor must not expect acks from it (else
    # "Stream has not started processing TP(topic='<app>-index', ...)" after stream_processing_timeout).
    index_topic = _raw_topic(app, s.index_topic, 1, acks=False)
    tables = {
        ns: app.Table(f"state-{ns}", default=None, key_type=bytes, value_type=bytes, partitions=1, store="rocksdb://")
        for ns in NAMESPACES
    }
    shards = shard_tables(app, s.index_shards)  # index shards: partitions held across the group
    bound_tables({**tables, **{f"shard-{ns}": t for ns, t in shards.items()}}, s.rocksdb_memory_mb)
    store = FaustTableStore(tables, s.state_dir / "journal")
    rt = Runtime(s, WorkerMetrics(s.app_id, s.processing_guarantee), store)
    rt.confirmed_at = lambda: faust_compat.membership_confirmed_at(app)
    rt.app_producer = app.producer  # connected from the app's start, before the stages' own clients
    rt.metrics.index_shards.set(s.index_shards)
    rt.metrics.standby_replicas.set(s.standby_replicas)
    follower = Follower(s, tables) if s.standby_replicas > 0 else None

    @app.agent(index_topic)
    async def decide(stream: Any) -> None:
        """Holds the index partition (and so the tables' partition) in Faust's consumer group.

        Records are not read through Faust's stream (per-event cost): the index partition is
        paused in Faust's consumer and read by the decide task's own consumer. Events Faust
        delivers before the pause (after a rebalance) are ignored: positions come from the state.
        """
        try:
            async for _ in stream:
                pause_index(app, rt)
        finally:
            await stop_pipeline(rt)
            await stop_sign_stage(rt)

    if shards:
        shard_topic = _raw_topic(app, s.shard_requests_topic, s.index_shards, acks=False)

        @app.agent(shard_topic)
        async def shard_calls(stream: Any) -> None:
            """Holds this worker's shard partitions in the group (each server reads its own)."""
            try:
                async for _ in stream:
                    pause_shards(app, rt)
            finally:
                await stop_shards(rt)

    async def on_revoked(sender: Any, revoked: Any, **kwargs: Any) -> None:
        # Before Faust may give the index partition to another worker: no batch in progress,
        # the last batch's changelog acknowledged, and no standby copy being written.
        if follower is not None:
            await follower.stop()
        if rt.shard_client is not None:  # a batch waiting for a shard gives up (the shard may move)
            rt.shard_client.pause("a rebalance is in progress")
        await close_gate(rt)
        await stop_shards(rt)  # each shard's last write acknowledged in its changelog

    async def on_assigned(sender: Any, assigned: Any, **kwargs: Any) -> None:
        rt.assigned = True
        rt.assigned_at = time.monotonic()  # the group's answer confirms the membership (membership.py)
        faust_compat.track_membership(app)
        if rt.engine is not None and not owns_index(app, rt):
            log.warning("the index partition moved to another worker: this worker now only signs")
            await stop_decide(rt)
            m = rt.metrics
            for gauge in (m.decider, m.clusters, m.state_documents, m.largest_cluster):
                gauge.set(0)  # the new decider reports them (a stale largest cluster kept its alert firing)

    cast(Any, app.on_partitions_revoked).connect(on_revoked)
    cast(Any, app.on_partitions_assigned).connect(on_assigned)

    async def steer() -> None:
        """Start the sign stage; build the engine and open the decide gate when this worker may decide."""
        if rt.fatal is not None or rt.stopping:  # stopping: the sign stage was stopped on purpose
            return
        if rt.sign_task is None:
            producer = await start_worker_producer(s, "sign")
            start_sign_stage(rt, SignStage(s, producer, rt.metrics, Signer(s.params(None)), _unchanged_hint(rt)))
        # the shards first: the decider's engine asks them (this worker may hold some) when it is built
        await steer_shards(app, rt, shards, rt.assigned and _settled(app), _new_consumer)
        if rt.assigned and _settled(app) and owns_index(app, rt):
            if rt.engine is None:
                await ensure_engine(app, rt, _Synthetic(s.index_topic))
            if (
                rt.engine is not None
                and not rt.gate.is_set()
                and membership_fresh(rt)
                and replaced(rt, INDEX_OFFSET_KEY)
            ):
                # another worker decided while this one was out of the group (frozen): its engine is out of date
                log.warning("another worker decided since this one's last batch: rebuilding the engine from the state")
                await stop_decide(rt)
            elif rt.engine is not None and membership_fresh(rt):
                pause_index(app, rt)
                if rt.shard_client is not None:
                    rt.shard_client.resume()
                rt.gate.set()
        elif follower is not None and rt.assigned and _settled(app) and not owns_index(app, rt):
            follower.start()
        rt.metrics.ready.set(int(_ready(app, rt)))
        if follower is not None:
            lag = follower.lag()
            rt.metrics.standby_lag.set(-1 if lag is None else lag)

    async def update_gauges() -> None:
        await refresh_gauges(app, rt)

    app.timer(0.2)(steer)
    app.timer(5.0)(update_gauges)
    policy = s.retention()
    if policy is not None:  # documents older than their source's maximum age leave (worker/retention.py)
        sweeper = RetentionSweeper(policy, s.expire_interval)

        async def expire_old_documents() -> None:
            await sweeper.tick(rt)

        app.timer(min(s.expire_interval, CHECK_EVERY_S))(expire_old_documents)

    @app.page("/metrics")
    async def metrics_view(web: Any, request: Any) -> Any:
        update_broker_status(rt)  # as of this scrape (the gauges' timer runs every 5 s; it started at 0)
        return web.bytes(rt.metrics.render(), content_type=CONTENT_TYPE)

    @app.page("/healthz")
    async def healthz(web: Any, request: Any) -> Any:
        return web.json({"status": "alive", "uptime_seconds": round(time.monotonic() - rt.started_at, 3)})

    @app.page("/readyz")
    async def readyz(web: Any, request: Any) -> Any:
        ready = _ready(app, rt)
        role = "decide" if owns_index(app, rt) else "sign"
        body = {"ready": ready, "role": role, "recovered": _recovered(app), "engine": rt.engine is not None}
        if rt.stopping:
            body["stopping"] = True
        body["broker"] = broker_status(rt)  # an outage is reported here, not as "not ready" (docs/worker.md)
        confirmed = faust_compat.membership_confirmed_at(app)
        if confirmed is not None and rt.assigned:  # the lease the decider holds (worker/membership.py)
            body["membership_confirmed_seconds_ago"] = round(lease_age(rt), 1)
        if rt.decide_waiting is not None:  # likewise a batch retried for a shard or the broker
            since, error = rt.decide_waiting
            body["decide_waiting"] = {"seconds": round(time.monotonic() - since, 1), "error": error}
        return web.json(body, status=200 if ready else 503)

    faust_compat.restrict_web(app, WEB_PATHS)
    if s.query_bind is not None:  # off by default; its own port (stream_dedupe.worker.query_http)
        from stream_dedupe.worker.query_http import QueryServer

        queries = QueryServer(rt, lambda: _ready(app, rt) and owns_index(app, rt) and rt.engine is not None)
        app.task(queries.serve)
    return WorkerApp(app, rt, tables)


def _raw_topic(app: faust.App, name: str, partitions: int, acks: bool = True) -> Any:
    """A topic of raw bytes keys and values (no codec)."""
    return app.topic(
        name,
        key_type=bytes,
        value_type=bytes,
        key_serializer="raw",
        value_serializer="raw",
        partitions=partitions,
        acks=acks,
    )


def _unchanged_hint(rt: Runtime) -> UnchangedHint | None:
    """The sign stage's hint of unchanged re-crawls: the decider's committed records, on the worker that decides."""
    if rt.settings.index_shards > 1:
        return None  # the engine runs in a thread there (shard calls): its state is not read from the loop

    def unchanged(docs: list[Document], deleted: set[str]) -> list[bool] | None:
        engine = rt.engine  # None on a worker that only signs; a closed gate: a rebalance or recovery
        return engine.unchanged_recrawls(docs, deleted) if engine is not None and rt.gate.is_set() else None

    return unchanged


def _recovered(app: faust.App) -> bool:
    """True once Faust recovered the tables from their changelogs."""
    return faust_compat.recovery_completed(app)


def _ready(app: faust.App, rt: Runtime) -> bool:
    """Ready: not stopping, signing, no rebalance or recovery in progress, the engine built if this worker decides."""
    signing = rt.sign is not None and rt.sign.joined and rt.assigned
    return (
        rt.fatal is None
        and not rt.stopping
        and signing
        and _settled(app)
        and (rt.engine is not None or not owns_index(app, rt))
    )


def _settled(app: faust.App) -> bool:
    """True when no rebalance or table recovery is in progress (and one recovery has completed)."""
    return _recovered(app) and not app.rebalancing and not faust_compat.in_recovery(app)
