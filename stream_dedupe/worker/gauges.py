"""The worker's periodic gauges (state size, clusters, lag) and its broker connectivity.

The registry and the per-batch metrics are :mod:`stream_dedupe.worker.metrics`; this module
refreshes what is read from outside the batches: every 5 s on a timer, and the broker part also
at every scrape and every ``/readyz``.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from stream_dedupe.storage.rocks import tree_bytes

#: Most of the decider's CPU the periodic scan of the clusters may take (the gauges
#: ``stream_dedupe_clusters`` and ``stream_dedupe_largest_cluster_size``).
CLUSTER_SCAN_SHARE = 0.02
#: Most seconds between two scans (a scan that costs more is repeated less often, never more).
CLUSTER_SCAN_MAX_INTERVAL = 300.0


def next_cluster_scan(now: float, cpu_seconds: float) -> float:
    """When the clusters may be scanned again: the scans take at most ``CLUSTER_SCAN_SHARE`` of a core.

    The scan reads one record per cluster of two or more documents. 300,000 of them (1M
    documents at 30% duplicates) took 2.7 s of CPU read through a ``StateView``, half of the
    decider's core at a refresh every 5 s; decoded from the scan itself, as now, 0.7 s. Small
    states are still scanned at every refresh; large ones every ``cpu / CLUSTER_SCAN_SHARE``
    seconds (at most ``CLUSTER_SCAN_MAX_INTERVAL``); the gauges keep their last value in
    between. ``cpu_seconds`` counts the scan's own slices, not the batches decided while it yields.
    """
    return now + min(cpu_seconds / CLUSTER_SCAN_SHARE, CLUSTER_SCAN_MAX_INTERVAL)


async def refresh_gauges(app: Any, rt: Any) -> None:
    """Update the periodic gauges: state size, clusters, consumer lag per input partition.

    Args:
        app: The Faust app.
        rt: The worker's :class:`~stream_dedupe.worker.pipeline.Runtime`.

    """
    from stream_dedupe.storage.state import decode_cluster

    input_topic_name = rt.settings.input_topic
    m = rt.metrics
    update_broker_status(rt)
    m.state_bytes.set(tree_bytes(rt.settings.state_dir))
    m.oversize_changelog.set(rt.store.oversize)
    waiting = getattr(rt, "decide_waiting", None)  # as /readyz reports it
    m.decide_retrying.set(0 if waiting is None else round(time.monotonic() - waiting[0], 1))
    engine = rt.engine
    if engine is not None:
        docs = rt.store.count("docs")
        m.state_documents.set(docs)
        now = time.monotonic()
        if now >= m.cluster_scan_due:
            merged_away, largest, spent = 0, 1 if docs else 0, 0.0
            # the committed records, read by the scan itself (not the engine's overlay: a batch may be
            # between process and commit; not a StateView either: it would keep every record decoded)
            scan = getattr(rt.store, "scan", rt.store.items)  # lazily, unsorted: never block the loop
            cpu = time.process_time()
            for i, (_, value) in enumerate(scan("clusters")):
                if i % 256 == 255:  # a scan of the whole state: let the pipeline run meanwhile
                    spent += time.process_time() - cpu
                    await asyncio.sleep(0)
                    cpu = time.process_time()
                size = decode_cluster(value).size
                merged_away += size - 1
                largest = max(largest, size)
            spent += time.process_time() - cpu
            m.clusters.set(docs - merged_away)
            m.largest_cluster.set(largest)
            m.cluster_scan_due = next_cluster_scan(time.monotonic(), spent)
    sign = getattr(rt, "sign", None)  # this worker's sign stage: its input partitions
    if sign is not None:
        m.lag.clear()
        for partition, lag in sign.lag().items():
            m.lag.labels(input_topic_name, str(partition)).set(lag)
    if engine is not None:  # the decider: records forwarded to the index but not decided yet
        for consumer in list(rt.consumers):
            for tp in consumer.assignment():
                high = consumer.highwater(tp)
                if high is not None:
                    m.lag.labels(tp.topic, str(tp.partition)).set(max(int(high) - rt.index_offset - 1, 0))


def _clients(rt: Any) -> list[Any]:
    """The aiokafka clients (``AIOKafkaClient``) of the worker's own producers and consumers."""
    sign = getattr(rt, "sign", None)
    # Faust's producer first: its client connects as the app starts, before the stages' clients
    # exist (without it broker_connected read 0 for the first ~2 s of every start)
    owners = [getattr(getattr(rt, "app_producer", None), "_producer", None), rt.producer, *list(rt.consumers)]
    if sign is not None:
        owners += [sign.producer, sign.consumer]
    return [c for c in (getattr(o, "client", None) or getattr(o, "_client", None) for o in owners if o) if c]


#: A client whose metadata a broker answered this recently counts as connected: a client
#: closes its bootstrap connection once it has the metadata and opens the next at its first
#: request (Faust's producer sat between the two for ~1 s of every start, reading as an outage).
ANSWERED_WITHIN_S = 3.0


def update_broker_status(rt: Any) -> bool:
    """Set ``broker_connected`` / ``broker_last_contact_seconds`` from the clients' connections and answers."""
    connected = False
    recent_ms = time.time() * 1000 - ANSWERED_WITHIN_S * 1000
    for client in _clients(rt):
        conns = getattr(client, "_conns", {}) or {}
        answered = getattr(getattr(client, "cluster", None), "_last_successful_refresh_ms", 0) or 0
        if answered > recent_ms or any(conn.connected() for conn in list(conns.values())):
            connected = True
            break
    now = time.monotonic()
    if connected or not hasattr(rt, "broker_seen_at"):
        rt.broker_seen_at = now
    rt.metrics.broker_connected.set(int(connected))
    rt.metrics.broker_last_contact.set(round(now - rt.broker_seen_at, 3))
    return connected


def broker_status(rt: Any) -> dict[str, Any]:
    """The broker connectivity part of the ``/readyz`` body."""
    connected = update_broker_status(rt)
    return {"connected": connected, "last_contact_seconds": round(time.monotonic() - rt.broker_seen_at, 3)}
