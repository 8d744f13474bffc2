"""The alerts' runbook commands read a worker's state directory, also while the worker runs.

``StreamDedupeRunawayCluster`` and ``StreamDedupeHotBuckets`` say to run ``stream-dedupe
clusters`` and ``boilerplate``; on a worker's pod they used to fail and tell the operator to run
``dedupe`` into the worker's state directory. They now read its Faust tables without a lock
(:class:`~stream_dedupe.storage.worker_tables.WorkerTablesStore`); a command that changes a state
refuses it.
"""

from __future__ import annotations

from typing import Any

import orjson

from stream_dedupe.exports import iter_clusters
from tests.integration.conftest import Broker, Names, consume, n_document_events, produce, run_cli, worker_state


def doc(i: int, variant: int = 0) -> bytes:
    words = " ".join(f"word{(i * 11 + j) % 983}" for j in range(60))
    return orjson.dumps({"id": f"p{i}-{variant}", "text": f"page {i} {words}" + " tail" * variant})


def test_stats_clusters_and_boilerplate_read_a_running_workers_state(
    broker: Broker, names: Names, workers: Any
) -> None:
    w = workers().start()
    w.wait_ready()
    # 30 pages, 10 of them with two near copies each: 10 clusters of 3
    records = [(f"p{i}-0".encode(), doc(i)) for i in range(30)]
    records += [(f"p{i}-{v}".encode(), doc(i, v)) for i in range(10) for v in (1, 2)]
    produce(broker.bootstrap, names.input, records)
    consume(broker.bootstrap, names.events, until=n_document_events(len(records)), timeout=90)

    text = run_cli("stats", "--state", str(w.state_dir))
    assert text.returncode == 0 and "(a Kafka worker's tables, as last written to disk)" in text.stdout, text.stderr
    assert "run:" not in text.stdout  # a worker has no runs (its input is a topic)
    stats = run_cli("stats", "--state", str(w.state_dir), "--json")
    assert stats.returncode == 0, stats.stderr
    counted = orjson.loads(stats.stdout)
    assert counted["documents"] == 50 and counted["clusters_with_duplicates"] == 10

    listed = run_cli("clusters", "--state", str(w.state_dir))
    assert listed.returncode == 0 and "Kafka worker's state" in listed.stderr, listed.stderr
    clusters = [orjson.loads(line) for line in listed.stdout.splitlines()]
    assert sorted(sorted(c["members"]) for c in clusters) == [[f"p{i}-{v}" for v in (0, 1, 2)] for i in range(10)]

    assert run_cli("boilerplate", "--state", str(w.state_dir)).returncode == 0
    refused = run_cli("expire", "--state", str(w.state_dir), "--max-age", "=1d")
    assert refused.returncode == 2 and "worker's state directory" in refused.stderr
    assert "dedupe FILE.jsonl" not in refused.stderr  # never tell the operator to write into it

    # the worker went on untouched; stopped, its tables hold what the commands read
    assert w.get("/readyz")[0] == 200
    assert w.stop() == 0
    stopped = worker_state(w.state_dir)
    assert sorted(sorted(c["members"]) for c in iter_clusters(stopped)) == sorted(
        sorted(c["members"]) for c in clusters
    )
