"""Scale-out: results do not depend on partitions, workers, or workers joining and leaving."""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from pathlib import Path
from typing import Any

import orjson

from stream_dedupe.exports import iter_clusters
from tests.integration.conftest import (
    Broker,
    Names,
    WorkerProcess,
    cluster_sets,
    consume,
    n_document_events,
    oracle,
    produce,
    replay_compacted,
    worker_state,
)
from tests.integration.test_worker_e2e import assert_one_decision_per_input, decision_order, synth_docs

N = 3000


def create_input(bootstrap: str, topic: str, partitions: int) -> None:
    from stream_dedupe.worker.topics import prepare_input_topic

    assert asyncio.run(prepare_input_topic(bootstrap, topic, partitions)), "the input topic existed already"


def metric(w: WorkerProcess, name: str, labels: str = "") -> float:
    """One sample of the worker's /metrics, ``labels`` as exposed (``'{stage="sign"}'``); 0 when absent."""
    status, body = w.get("/metrics")
    assert status == 200
    match = re.search(rf"^{re.escape(name + labels)} (\S+)$", body.decode(), re.MULTILINE)
    return float(match.group(1)) if match else 0.0


def role(w: WorkerProcess) -> str:
    _, body = w.get("/readyz")
    return str(orjson.loads(body)["role"])


def clusters_with_canonicals(store: Any) -> set[tuple[str, frozenset[str]]]:
    return {(str(c["canonical"]), frozenset(c["members"])) for c in iter_clusters(store, min_size=1)}


def run_topology(
    broker: Broker, workers: Any, docs: list[bytes], partitions: int, n_workers: int, tmp: Path
) -> tuple[Any, dict[bytes, bytes], list[float]]:
    """Dedupe ``docs`` with ``partitions`` input partitions and ``n_workers`` workers; state of the decider."""
    names = Names(f"t{uuid.uuid4().hex[:10]}")
    create_input(broker.bootstrap, names.input, partitions)
    started = [
        workers(state_dir=tmp / f"{partitions}p-w{i}", log_name=f"{partitions}p-w{i}", app=names).start()
        for i in range(n_workers)
    ]
    for w in started:
        w.wait_ready(90)
    produce(broker.bootstrap, names.input, [(orjson.loads(d)["id"].encode(), d) for d in docs])
    msgs = consume(broker.bootstrap, names.events, until=n_document_events(len(docs)), timeout=240)
    assert_one_decision_per_input(msgs, len(docs))
    deciders = [w for w in started if role(w) == "decide"]
    assert len(deciders) == 1, [role(w) for w in started]
    forwarded = [metric(w, "stream_dedupe_forwarded_records_total") for w in started]
    for w in started:
        assert w.stop() == 0
    deduped = replay_compacted(consume(broker.bootstrap, names.deduped))
    return worker_state(deciders[0].state_dir), deduped, forwarded


def test_one_partition_one_worker_equals_four_partitions_two_workers(
    broker: Broker, workers: Any, tmp_path: Path
) -> None:
    docs = synth_docs(N, seed=21)
    single, single_deduped, alone = run_topology(broker, workers, docs, 1, 1, tmp_path)
    spread, spread_deduped, pair = run_topology(broker, workers, docs, 4, 2, tmp_path)

    assert clusters_with_canonicals(spread) == clusters_with_canonicals(single)
    assert sum(1 for c in clusters_with_canonicals(single) if len(c[1]) > 1) > 300
    assert spread_deduped == single_deduped  # the same canonical documents, byte for byte
    # Both workers signed a share of the input (the CPU-heavy stage is spread over them).
    assert all(n > 0 for n in pair) and sum(pair) >= N, pair
    assert alone[0] >= N


def test_worker_joins_and_leaves_mid_stream(broker: Broker, names: Names, workers: Any, tmp_path: Path) -> None:
    docs = synth_docs(N, seed=22)
    create_input(broker.bootstrap, names.input, 4)
    first = workers(state_dir=tmp_path / "a", log_name="a", extra=["--batch-size", "50"]).start()
    first.wait_ready()
    keyed = [(orjson.loads(d)["id"].encode(), d) for d in docs]
    produce(broker.bootstrap, names.input, keyed[:1000])

    consume(broker.bootstrap, names.events, until=n_document_events(600), timeout=120, idle=0)
    second = workers(state_dir=tmp_path / "b", log_name="b", extra=["--batch-size", "50"]).start()
    second.wait_ready(90)
    produce(broker.bootstrap, names.input, keyed[1000:2000])
    consume(broker.bootstrap, names.events, until=n_document_events(1800), timeout=120, idle=0)
    assert metric(second, "stream_dedupe_forwarded_records_total") > 0  # it took input partitions
    # the state gauges come from the decider only: a worker that handed the role on reports 0
    # (a stale largest cluster kept StreamDedupeRunawayCluster firing), whichever worker decides now
    (signer,) = [w for w in (first, second) if role(w) != "decide"]
    for gauge in ("stream_dedupe_decider", "stream_dedupe_clusters", "stream_dedupe_largest_cluster_size"):
        assert metric(signer, gauge) == 0, gauge
    # The first worker leaves (SIGTERM) mid-stream: the second takes every input partition and, if
    # it did not own it already, the index partition (restoring the state from the changelogs).
    assert first.stop() == 0
    produce(broker.bootstrap, names.input, keyed[2000:])
    deadline = time.monotonic() + 60
    while role(second) != "decide" or second.get("/readyz")[0] != 200:
        assert time.monotonic() < deadline, second.log()[-3000:]
        time.sleep(0.2)
    msgs = consume(broker.bootstrap, names.events, until=n_document_events(N), timeout=240)
    assert second.stop() == 0

    events = assert_one_decision_per_input(msgs, N)  # re-decided records got identical events
    raw_by_id = {orjson.loads(d)["id"]: d for d in docs}
    expected_store, expected_events = oracle(decision_order(events, raw_by_id))
    assert events == expected_events
    state = worker_state(second.state_dir)
    assert cluster_sets(state) == cluster_sets(expected_store)
    assert clusters_with_canonicals(state) == clusters_with_canonicals(expected_store)
    # Equal to a clean run's final state: the clusters do not depend on the arrival order.
    clean_store, _ = oracle(docs)
    assert clusters_with_canonicals(state) == clusters_with_canonicals(clean_store)


def test_standby_copy_follows_and_takes_over_after_kill9(
    broker: Broker, names: Names, workers: Any, tmp_path: Path
) -> None:
    docs = synth_docs(N, seed=23)
    create_input(broker.bootstrap, names.input, 4)
    extra = ["--standby-replicas", "1"]
    pair = [workers(state_dir=tmp_path / f"s{i}", log_name=f"s{i}", extra=extra).start() for i in range(2)]
    for w in pair:
        w.wait_ready(90)
    keyed = [(orjson.loads(d)["id"].encode(), d) for d in docs]
    produce(broker.bootstrap, names.input, keyed[:2000])
    consume(broker.bootstrap, names.events, until=n_document_events(2000), timeout=180, idle=0)
    decider = next(w for w in pair if role(w) == "decide")
    standby = next(w for w in pair if w is not decider)
    assert metric(decider, "stream_dedupe_standby_lag_records") == -1  # the decider does not follow
    deadline = time.monotonic() + 60  # the standby copy catches up with every changelog record
    while metric(standby, "stream_dedupe_standby_lag_records") != 0:
        assert time.monotonic() < deadline, standby.log()[-3000:]
        time.sleep(0.5)

    decider.kill9()
    produce(broker.bootstrap, names.input, keyed[2000:])
    msgs = consume(broker.bootstrap, names.events, until=n_document_events(N), timeout=240)
    assert role(standby) == "decide"
    assert standby.stop() == 0
    events = assert_one_decision_per_input(msgs, N)
    expected_store, expected_events = oracle(decision_order(events, {orjson.loads(d)["id"]: d for d in docs}))
    assert events == expected_events
    assert cluster_sets(worker_state(standby.state_dir)) == cluster_sets(expected_store)
