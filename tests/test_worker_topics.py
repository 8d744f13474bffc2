"""The worker's topic specifications and the checks of existing topics' configurations (no broker).

The same checks run against a real broker in tests/integration/test_worker_web_and_topics.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from stream_dedupe.storage.base import NAMESPACES
from stream_dedupe.worker.errors import TopicLayoutError, WorkerConfigError
from stream_dedupe.worker.settings import WorkerSettings
from stream_dedupe.worker.topics import DAY_MS, check_configs, partition_warnings, worker_topics

S = WorkerSettings(app_id="app", replication_factor=3)


def test_every_topic_gets_the_replication_factor_and_min_insync() -> None:
    specs = worker_topics(S)
    assert {s.replication_factor for s in specs} == {3}
    assert {s.config["min.insync.replicas"] for s in specs} == {"2"}
    names = {s.name for s in specs}
    assert {f"app-state-{ns}-changelog" for ns in NAMESPACES} <= names, "Faust's changelogs are created too"
    one = worker_topics(WorkerSettings(app_id="app", replication_factor=1))
    assert {s.config["min.insync.replicas"] for s in one} == {"1"}
    assert [WorkerSettings(replication_factor=n).min_insync_replicas for n in (1, 2, 3, 5)] == [1, 1, 2, 2]


def test_deduped_index_and_changelog_configs() -> None:
    specs = {s.name: s for s in worker_topics(S)}
    deduped = specs[S.deduped_topic].config
    assert deduped["cleanup.policy"] == "compact"
    assert int(deduped["delete.retention.ms"]) == 7 * DAY_MS and int(deduped["min.compaction.lag.ms"]) == 3_600_000
    index = specs[S.index_topic]
    assert index.partitions == 1 and index.exact_partitions and index.config["retention.ms"] == str(7 * DAY_MS)
    assert int(specs[S.dlq_topic].config["max.message.bytes"]) > 2 * S.max_doc_bytes
    for ns in NAMESPACES:
        assert specs[f"app-state-{ns}-changelog"].config["cleanup.policy"] == "compact"


@pytest.mark.parametrize(
    ("value", "flag"), [({"replication_factor": 0}, "--replication-factor"), ({"rocksdb_memory_mb": 8}, "--rocksdb")]
)
def test_invalid_settings_name_the_flag(value: dict[str, int], flag: str) -> None:
    with pytest.raises(WorkerConfigError, match=flag):
        WorkerSettings(**value)  # type: ignore[arg-type]


def _spec(role: str) -> Any:
    return next(s for s in worker_topics(S) if s.role == role)


GOOD = {"cleanup.policy": "compact", "max.message.bytes": str(2 << 20), "min.insync.replicas": "2"}


@pytest.mark.parametrize(
    ("role", "config", "message"),
    [
        ("deduped", {"cleanup.policy": "delete"}, "cleanup.policy=delete but must be compacted only"),
        ("changelog", {"cleanup.policy": "compact,delete"}, "would lose state"),
        ("index", {"cleanup.policy": "delete", "retention.ms": "1000"}, "keeps records 1000 ms"),
        ("deduped", {"max.message.bytes": "1000"}, "max.message.bytes=1000, below max_doc_bytes"),
    ],
)
def test_refused_configurations(role: str, config: dict[str, str], message: str) -> None:
    spec = _spec(role)
    with pytest.raises(TopicLayoutError, match=message) as caught:
        check_configs([spec], {spec.name: {**GOOD, **config}})
    assert "kafka-configs.sh" in str(caught.value) and spec.name in str(caught.value)


def test_warnings_explain_the_risk_and_the_fix() -> None:
    index, deduped = _spec("index"), _spec("deduped")
    configs = {
        index.name: {**GOOD, "cleanup.policy": "delete", "retention.ms": str(DAY_MS), "retention.bytes": "10"},
        deduped.name: {**GOOD, "delete.retention.ms": str(DAY_MS), "max.message.bytes": "1048588"},
    }
    warnings = check_configs([index, deduped], configs)
    text = "\n".join(warnings)
    assert "keeps records only 24.0 h" in text and "never decided" in text and "retention.bytes=10" in text
    assert "keeps tombstones 24 h" in text and "misses deletions" in text
    assert "max.message.bytes=1048588" in text
    assert all("kafka-configs.sh" in w for w in warnings) and len(warnings) == 4
    insync = check_configs([deduped], {deduped.name: {**GOOD, "min.insync.replicas": "1"}})
    assert insync == [
        f"topic {deduped.name!r} keeps tombstones 24 h after compaction (delete.retention.ms): an indexer replaying "
        "it or offline longer than that misses deletions and keeps stale documents (kafka-configs.sh "
        f"--bootstrap-server <broker> --alter --entity-type topics --entity-name {deduped.name} --add-config "
        f"delete.retention.ms={7 * DAY_MS})",
        f"topic {deduped.name!r} has min.insync.replicas=1: an acknowledged record may live on one broker only "
        f"(kafka-configs.sh --bootstrap-server <broker> --alter --entity-type topics --entity-name {deduped.name} "
        "--add-config min.insync.replicas=2)",
    ]


def test_the_meta_changelogs_close_their_segments_within_an_hour() -> None:
    # They carry every batch's redo journal, tombstoned at once: dead records until compaction,
    # which only cleans closed segments (the broker's default closes one after 1 GB or 7 days).
    sharded = WorkerSettings(app_id="app", replication_factor=3, index_shards=2)
    specs = {s.name: s for s in worker_topics(sharded)}
    for name in ("app-state-meta-changelog", "app-shard-meta-changelog"):
        config = specs[name].config
        assert config["cleanup.policy"] == "compact"
        assert int(config["segment.ms"]) == 3_600_000 and int(config["segment.bytes"]) == 64 << 20
    others = [s for n, s in specs.items() if n.endswith("-changelog") and "-meta-" not in n]
    assert others and all("segment.ms" not in s.config for s in others)
    meta = specs["app-state-meta-changelog"]
    assert check_configs([meta], {meta.name: {**GOOD, **meta.config}}) == []
    default = check_configs([meta], {meta.name: {**GOOD, "segment.ms": str(7 * DAY_MS), "segment.bytes": str(1 << 30)}})
    assert len(default) == 1 and "after 168 h or 1024 MiB" in default[0] and "read by every restore" in default[0]
    assert "--add-config segment.ms=3600000,segment.bytes=67108864" in default[0]


def test_an_events_topic_of_several_partitions_gets_a_warning_with_the_fix() -> None:
    s = WorkerSettings(app_id="a")
    specs = worker_topics(s)
    (events,) = [spec for spec in specs if spec.role == "events"]
    assert events.partitions == 1 and not events.exact_partitions  # an older topic still works
    (warning,) = partition_warnings(specs, {events.name: 4, s.input_topic: 4, s.deduped_topic: 4})
    assert f"topic '{events.name}' has 4 partitions" in warning and "order them by seq" in warning
    assert f"kafka-topics.sh --delete --topic {events.name}" in warning
    assert partition_warnings(specs, {events.name: 1}) == [] and partition_warnings(specs, {}) == []
