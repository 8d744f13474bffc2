"""``stats --prometheus``: a state's counts as Prometheus gauges, for node_exporter's textfile collector.

The embedded command has no HTTP endpoint: a backfill or an hourly ``dedupe`` from cron is watched
by writing this file next to its runs (node_exporter ``--collector.textfile.directory``). The
gauges the Kafka worker also exports keep its names and meaning (``stream_dedupe_state_documents``,
``stream_dedupe_state_bytes``, ``stream_dedupe_clusters``, ``stream_dedupe_largest_cluster_size``),
so one dashboard reads both; every series has a ``state`` label, the state directory.
"""

from __future__ import annotations

import os
from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge, generate_latest

from stream_dedupe.state_stats import StateStats

#: ``(metric name, help, StateStats attribute)`` of the whole-state gauges.
_GAUGES = (
    ("stream_dedupe_state_documents", "Documents in the state.", "documents"),
    ("stream_dedupe_state_representatives", "Documents in the deduped set.", "representatives"),
    ("stream_dedupe_state_dropped", "Documents covered by a representative (out of the deduped set).", "dropped"),
    ("stream_dedupe_clusters", "Clusters in the state (singletons included).", "clusters"),
    ("stream_dedupe_state_clusters_with_duplicates", "Clusters of two or more documents.", "clusters_with_duplicates"),
    ("stream_dedupe_largest_cluster_size", "Members of the largest cluster.", "largest_cluster"),
    (
        "stream_dedupe_state_largest_cover",
        "Most documents one representative holds (itself included).",
        "largest_cover",
    ),
    ("stream_dedupe_state_learned_lines", "Lines learned as boilerplate.", "learned_lines"),
    ("stream_dedupe_state_events", "Events emitted into the state so far (the last seq).", "events"),
)
#: ``(metric name, help, SourceStats attribute)`` of the per-source gauges (``stats --by-source``).
_SOURCE_GAUGES = (
    ("stream_dedupe_state_source_documents", "Documents of a source in the state.", "documents"),
    ("stream_dedupe_state_source_dropped", "Documents of a source covered by a representative.", "dropped"),
    ("stream_dedupe_state_source_learned_lines", "Lines learned as boilerplate for a source.", "learned_lines"),
)


def exposition(counted: StateStats, state: Path) -> bytes:
    """The Prometheus text exposition of ``counted`` (the stats of the state directory ``state``)."""
    registry = CollectorRegistry(auto_describe=True)
    label = str(state.resolve())
    for name, text, attribute in _GAUGES:
        Gauge(name, text, ["state"], registry=registry).labels(label).set(getattr(counted, attribute))
    run = counted.unfinished_run
    gauges = {
        "stream_dedupe_state_bytes": ("Bytes of the state directory.", counted.disk_bytes or 0),
        "stream_dedupe_state_run_unfinished": (
            "1 while the state's last dedupe run has not finished (stopped, or still running), else 0.",
            int(run is not None),
        ),
        "stream_dedupe_state_run_line": (
            "Lines of its current input that run had committed (0: none).",
            run["line"] if run else 0,
        ),
        "stream_dedupe_state_in_use": (
            "1 when another process held the state while it was read, else 0.",
            int(counted.live),
        ),
    }
    for name, (text, value) in gauges.items():
        Gauge(name, text, ["state"], registry=registry).labels(label).set(value)
    if counted.sources is not None:
        for name, text, attribute in _SOURCE_GAUGES:
            gauge = Gauge(name, text, ["state", "source"], registry=registry)
            for source, per_source in counted.sources.items():
                gauge.labels(label, source).set(getattr(per_source, attribute))
    return generate_latest(registry)


def write_atomically(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a sibling file and a rename: a collector never reads half of it."""
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        partial.write_bytes(data)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
