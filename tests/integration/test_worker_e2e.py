"""End to end: produce CLI -> worker on the real broker -> events, deduped topic, state == embedded engine."""

from __future__ import annotations

import asyncio
import importlib.util
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import jsonschema
import orjson

from stream_dedupe.exports import iter_canonical_documents
from tests.integration.conftest import (
    REPO,
    Broker,
    Msg,
    Names,
    cluster_sets,
    consume,
    n_document_events,
    oracle,
    replay_compacted,
    run_cli,
    worker_state,
)

SCHEMA = json.loads((REPO / "stream_dedupe" / "schema" / "events.schema.json").read_text())


def synth_docs(n: int, seed: int, start: int = 0) -> list[bytes]:
    spec = importlib.util.spec_from_file_location("synth", REPO / "bench" / "synth.py")
    assert spec and spec.loader
    synth = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(synth)
    return [orjson.dumps(d) for d in synth.generate(n, seed)][start:]


def by_origin(msgs: list[Msg]) -> dict[bytes, list[Msg]]:
    """Event messages grouped by the input record they answer (header sd-origin)."""
    groups: dict[bytes, list[Msg]] = defaultdict(list)
    for m in msgs:
        groups[m.headers["sd-origin"]].append(m)
    return groups


def assert_one_decision_per_input(msgs: list[Msg], n_inputs: int) -> list[dict[str, Any]]:
    """Every input has document events, all identical; returns the distinct events ordered by seq."""
    by_seq: dict[int, bytes] = {}
    for m in msgs:
        seq = m.json()["seq"]
        assert m.value is not None
        assert by_seq.setdefault(seq, m.value) == m.value, f"two different events with seq {seq}"
    docs_per_origin = {
        origin: {
            m.value for m in group if m.json()["event"] in ("new", "duplicate-of", "unchanged", "deleted", "invalid")
        }
        for origin, group in by_origin(msgs).items()
    }
    assert len(docs_per_origin) == n_inputs
    for origin, values in docs_per_origin.items():
        assert len(values) == 1, f"input {origin!r} got {len(values)} different document events"
    return [orjson.loads(by_seq[s]) for s in sorted(by_seq)]


def decision_order(events: list[dict[str, Any]], raw_by_id: dict[str, bytes]) -> list[bytes]:
    return [raw_by_id[e["id"]] for e in events if e["event"] in ("new", "duplicate-of", "unchanged")]


async def _configs(bootstrap: str, names: list[str]) -> dict[str, dict[str, str]]:
    from stream_dedupe.worker.admin import connect_admin
    from stream_dedupe.worker.topics import topic_configs

    admin = await connect_admin(bootstrap, 10)
    try:
        return await topic_configs(admin, names)
    finally:
        await admin.close()


def test_end_to_end_matches_embedded_engine(broker: Broker, names: Names, workers: Any, tmp_path: Path) -> None:
    docs = synth_docs(3000, seed=11)
    corpus = tmp_path / "crawl.jsonl"
    corpus.write_bytes(b"\n".join(docs) + b"\n")
    produced = run_cli(
        "produce",
        str(corpus),
        "--broker",
        broker.bootstrap,
        "--topic",
        names.input,
        "--partitions",
        "3",
        "--no-progress",
    )
    assert produced.returncode == 0, produced.stderr
    assert "sent 3,000 records" in produced.stderr and "all acknowledged" in produced.stderr

    w = workers().start()
    startup = w.wait_ready()
    msgs = consume(broker.bootstrap, names.events, until=n_document_events(3000), timeout=120)
    events = assert_one_decision_per_input(msgs, 3000)
    validator = jsonschema.Draft202012Validator(SCHEMA)
    for event in events:
        validator.validate(event)
    assert w.stop() == 0
    print(f"worker ready after {startup:.1f}s")

    # The embedded engine over the same documents in the worker's decision order: same events, same state.
    raw_by_id = {orjson.loads(d)["id"]: d for d in docs}
    expected_store, expected_events = oracle(decision_order(events, raw_by_id))
    assert events == expected_events
    state = worker_state(w.state_dir)
    assert cluster_sets(state) == cluster_sets(expected_store)
    # (how many arrive as duplicate-of depends on the arrival order; how many end up covered does not)
    from stream_dedupe.storage.state import DocRecord

    assert sum(1 for _, raw in expected_store.items("docs") if DocRecord.decode(raw).covered_by) > 500

    # Replaying the compacted deduped topic from the start yields exactly the canonical set.
    deduped_msgs = consume(broker.bootstrap, names.deduped)
    deduped = replay_compacted(deduped_msgs)
    canonical = set(iter_canonical_documents(expected_store))
    assert set(deduped.values()) == canonical
    assert set(deduped) == {orjson.loads(raw)["id"].encode() for raw in canonical}

    # Every keyed record is on the partition the Java client's default partitioner (murmur2) picks.
    from aiokafka.partitioner import DefaultPartitioner  # type: ignore[import-untyped]
    from confluent_kafka.admin import AdminClient

    listed = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10).topics
    partitions = sorted(listed[names.deduped].partitions)
    assert len(partitions) > 1
    assert all(m.partition == DefaultPartitioner()(m.key, partitions, partitions) for m in deduped_msgs)
    # The events are on one partition, in the decision order: a consumer that applies them as they
    # come, skipping a repeat (a seq not above the last one seen: README, "Delivery"), sees every
    # seq once, in order.
    assert sorted(listed[names.events].partitions) == [0]
    kept, last = [], 0
    for m in msgs:
        if (seq := m.json()["seq"]) > last:
            kept.append(seq)
            last = seq
    assert kept == list(range(1, len(events) + 1))

    # Topics: deduped topic and every table changelog are compacted; the index topic has one partition.
    changelogs = [f"{names.app_id}-state-{ns}-changelog" for ns in ("meta", "docs", "sigs", "documents")]
    configs = asyncio.run(_configs(broker.bootstrap, [names.deduped, *changelogs]))
    for topic in [names.deduped, *changelogs]:
        assert configs[topic]["cleanup.policy"] == "compact", topic
