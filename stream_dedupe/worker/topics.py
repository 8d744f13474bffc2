"""Creating and checking the worker's topics with the aiokafka admin client.

The worker creates what is missing before Faust starts, the tables' changelog topics included
(Faust would create them itself, without ``min.insync.replicas``), every one with
``replication_factor`` replicas. It refuses to start when the cluster has fewer brokers than that,
when the internal index topic does not have exactly one partition (the decide stage and its tables
are single-partition by design) or when an existing topic's configuration would lose or refuse
data (see :func:`check_configs`), and warns about the settings that only risk it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewTopic  # type: ignore[import-untyped]
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType  # type: ignore[import-untyped]
from aiokafka.errors import TopicAlreadyExistsError  # type: ignore[import-untyped]

from stream_dedupe.storage.base import NAMESPACES
from stream_dedupe.worker.admin import close_quietly, connect_admin
from stream_dedupe.worker.errors import TopicLayoutError
from stream_dedupe.worker.settings import WorkerSettings

log = logging.getLogger("stream_dedupe.worker.topics")

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
COMPACT = {"cleanup.policy": "compact"}
#: The deduped topic: tombstones stay 7 days after compaction (an indexer that replays the topic,
#: or catches up after an outage, within 7 days sees every deletion) and no record is compacted
#: away within an hour of being written (a consumer less than an hour behind sees every update).
DEDUPED_CONFIG = {**COMPACT, "delete.retention.ms": str(7 * DAY_MS), "min.compaction.lag.ms": str(HOUR_MS)}
#: The index topic: a decide stage stopped for longer than this skips the records deleted meanwhile.
INDEX_RETENTION_MS = 7 * DAY_MS
#: An index topic retention below this is refused (a routine restart could lose records).
INDEX_RETENTION_FLOOR_MS = HOUR_MS
#: The ``meta`` changelogs (the decider's and each shard's) carry every batch's redo journal
#: (:mod:`stream_dedupe.worker.store`), tombstoned once the batch is in the other changelogs: about
#: 2 KB a document of dead records, which Kafka only compacts away once their segment is closed.
#: The broker's default segment (1 GB or 7 days) kept up to 1 GB of them, read again by every
#: restore; these bound them to one 64 MiB segment or one hour of batches.
JOURNAL_SEGMENT_BYTES = 64 << 20
JOURNAL_SEGMENT_MS = HOUR_MS
JOURNAL_CHANGELOG_CONFIG = {
    **COMPACT,
    "segment.bytes": str(JOURNAL_SEGMENT_BYTES),
    "segment.ms": str(JOURNAL_SEGMENT_MS),
}
#: Room for the headers (signature, origin) and the JSON envelope on top of a document.
RECORD_OVERHEAD = 64 << 10


@dataclass(frozen=True)
class TopicSpec:
    """A topic the worker needs.

    Attributes:
        name: Topic name.
        partitions: Partitions when created.
        config: Topic configuration when created.
        exact_partitions: When set, an existing topic must have exactly ``partitions``.
        replication_factor: Replicas when created.
        role: ``input``, ``events``, ``deduped``, ``dlq``, ``index`` or ``changelog`` (what is checked).
        max_message_bytes: ``max.message.bytes`` when created: the largest record the worker
            writes to it (None: the broker's default); an existing topic below it is warned about.
        required_message_bytes: An existing topic below this ``max.message.bytes`` is refused (a
            document of ``max_doc_bytes`` could not be written).

    """

    name: str
    partitions: int
    config: dict[str, str]
    exact_partitions: bool = False
    replication_factor: int = 1
    role: str = "input"
    max_message_bytes: int | None = field(default=None)
    required_message_bytes: int | None = field(default=None)


def worker_topics(settings: WorkerSettings) -> list[TopicSpec]:
    """The topics of a worker, with the settings they are created with."""
    n, rf = settings.input_partitions, settings.replication_factor
    doc = settings.max_doc_bytes + RECORD_OVERHEAD
    dlq = 2 * settings.max_doc_bytes + RECORD_OVERHEAD  # base64 of the original bytes in a JSON envelope
    common = {"min.insync.replicas": str(settings.min_insync_replicas)}

    def spec(name: str, partitions: int, role: str, size: int | None, extra: dict[str, str]) -> TopicSpec:
        config = {**common, **extra}
        if size is not None:
            config["max.message.bytes"] = str(size)
        required = settings.max_doc_bytes if role in ("deduped", "index", "changelog") else None
        return TopicSpec(name, partitions, config, role == "index", rf, role, size, required)

    index = {"retention.ms": str(INDEX_RETENTION_MS), "retention.bytes": "-1"}
    topics = [
        spec(settings.input_topic, n, "input", None, {}),
        spec(settings.events_topic, 1, "events", None, {}),  # one partition: the decision order, by seq
        spec(settings.deduped_topic, n, "deduped", doc, DEDUPED_CONFIG),
        spec(settings.dlq_topic, n, "dlq", dlq, {}),
        spec(settings.index_topic, 1, "index", doc, index),
    ]
    topics += [spec(changelog_topic(settings, ns), 1, "changelog", doc, _changelog_config(ns)) for ns in NAMESPACES]
    return topics + shard_topics(settings, common)


def _changelog_config(namespace: str) -> dict[str, str]:
    """A table changelog's configuration: compacted; ``meta``'s closes its segments sooner (the journal)."""
    return dict(JOURNAL_CHANGELOG_CONFIG if namespace == "meta" else COMPACT)


#: The shard tables (``--index-shards`` >= 2), as in :mod:`stream_dedupe.worker.shard_serve`.
SHARD_TABLES = ("meta", "docs", "sigs", "sets")
#: ``max.message.bytes`` of the shard topics: a call part is at most 512 KB plus its header.
SHARD_MESSAGE_BYTES = 1 << 20


def shard_topics(settings: WorkerSettings, common: dict[str, str]) -> list[TopicSpec]:
    """The index shards' topics: calls and answers, and the shard tables' changelogs (none for 1 shard)."""
    shards, rf = settings.index_shards, settings.replication_factor
    if shards < 2:
        return []
    size = max(SHARD_MESSAGE_BYTES, settings.max_doc_bytes + RECORD_OVERHEAD)

    def spec(name: str, partitions: int, role: str, extra: dict[str, str]) -> TopicSpec:
        config = {**common, **extra, "max.message.bytes": str(size)}
        return TopicSpec(name, partitions, config, True, rf, role, size, None)

    calls = {"retention.ms": str(INDEX_RETENTION_MS), "retention.bytes": "-1"}
    answers = {"retention.ms": str(HOUR_MS)}
    topics = [
        spec(settings.shard_requests_topic, shards, "shard-requests", calls),
        spec(settings.shard_replies_topic, 1, "shard-replies", answers),
    ]
    topics += [
        spec(shard_changelog_topic(settings, ns), shards, "changelog", _changelog_config(ns)) for ns in SHARD_TABLES
    ]
    return topics


def shard_changelog_topic(settings: WorkerSettings, namespace: str) -> str:
    """The changelog topic of a shard table (``<app_id>-shard-<ns>-changelog``, one partition a shard)."""
    return f"{settings.app_id}-shard-{namespace}-changelog"


def changelog_topic(settings: WorkerSettings, namespace: str) -> str:
    """The changelog topic of a state table, as Faust names it (``<app_id>-state-<ns>-changelog``)."""
    return f"{settings.app_id}-state-{namespace}-changelog"


async def partition_counts(admin: AIOKafkaAdminClient, names: list[str]) -> dict[str, int]:
    """Partition count of each existing topic among ``names``."""
    existing = set(await admin.list_topics())
    wanted = [n for n in names if n in existing]
    if not wanted:
        return {}
    described: Any = await admin.describe_topics(wanted)
    return {t["topic"]: len(t["partitions"]) for t in described if not t.get("error_code")}


async def ensure_topics(admin: AIOKafkaAdminClient, specs: list[TopicSpec]) -> list[str]:
    """Create the missing topics and check the existing ones; returns the names created.

    Raises:
        TopicLayoutError: if the cluster has fewer brokers than a topic's replication factor, or an
            existing topic has a partition count or a configuration the worker cannot use.

    """
    await check_brokers(admin, max((s.replication_factor for s in specs), default=1))
    counts = await partition_counts(admin, [s.name for s in specs])
    for spec in specs:
        have = counts.get(spec.name)
        if have is not None and spec.exact_partitions and have != spec.partitions:
            raise TopicLayoutError(
                f"topic {spec.name!r} has {have} partitions but the worker's decide stage needs exactly "
                f"{spec.partitions} (its tables are single-partition): delete the topic "
                f"(kafka-topics.sh --delete --topic {spec.name}) so the worker recreates it, or use another "
                "app id (STREAM_DEDUPE_APP_ID / --app-id) which names a new index topic"
            )
    for warning in partition_warnings(specs, counts):
        log.warning("%s", warning)
    existing = [s for s in specs if s.name in counts]
    if existing:
        configs = await topic_configs(admin, [s.name for s in existing])
        for warning in check_configs(existing, configs):
            log.warning("%s", warning)
    missing = [s for s in specs if s.name not in counts]
    if missing:
        new = [
            NewTopic(s.name, s.partitions, replication_factor=s.replication_factor, topic_configs=s.config)
            for s in missing
        ]
        try:
            await admin.create_topics(new, timeout_ms=30_000)
        except TopicAlreadyExistsError:
            log.info("topics created concurrently by another client")
        await _wait_visible(admin, [s.name for s in missing])
        for s in missing:
            log.info(
                "created topic %s (%d partitions, %d replicas, %s)",
                s.name,
                s.partitions,
                s.replication_factor,
                s.config or "default config",
            )
    return [s.name for s in missing]


def partition_warnings(specs: list[TopicSpec], counts: dict[str, int]) -> list[str]:
    """Warnings for existing topics whose partition count the worker runs with but would not create.

    The events topic is created with one partition since 2026-12-07 (CHANGELOG.md): an older one
    with several still works, but its consumers cannot read the events in decision order.
    """
    warnings = []
    for spec in specs:
        have = counts.get(spec.name)
        if spec.role == "events" and have is not None and have > spec.partitions:
            warnings.append(
                f"topic {spec.name!r} has {have} partitions: its events are in decision order only within each, so "
                "a consumer must order them by seq across partitions. Recreate it with one partition (delete it "
                f"while no worker runs: kafka-topics.sh --delete --topic {spec.name}; the worker creates it again) "
                "to let consumers read the events in order"
            )
    return warnings


async def check_brokers(admin: AIOKafkaAdminClient, replication_factor: int) -> None:
    """Refuse a replication factor the cluster cannot place.

    Raises:
        TopicLayoutError: with the fix (fewer replicas, e.g. 1 for a single local broker).

    """
    cluster: Any = await admin.describe_cluster()
    brokers = len(cluster.get("brokers", []))
    if brokers < replication_factor:
        local = " (a single local broker)" if brokers == 1 else ""
        raise TopicLayoutError(
            f"the Kafka cluster has {brokers} broker{'s' if brokers != 1 else ''} but stream-dedupe creates its "
            f"topics with {replication_factor} replicas (replication_factor, default 3 for production): pass "
            f"--replication-factor {brokers} (STREAM_DEDUPE_REPLICATION_FACTOR={brokers}) for a cluster this "
            f"small{local}, or add brokers"
        )


def _alter(topic: str, setting: str) -> str:
    return f"kafka-configs.sh --bootstrap-server <broker> --alter --entity-type topics --entity-name {topic} " + (
        f"--add-config {setting}"
    )


def check_configs(specs: list[TopicSpec], configs: dict[str, dict[str, str]]) -> list[str]:
    """Check existing topics' configurations; the warnings to log.

    Refused (data would be lost or refused): a deduped or changelog topic that is not compacted or
    also deletes by time; an index topic kept less than an hour; a ``max.message.bytes`` below the
    largest record the worker writes. Warned: an index topic kept less than 7 days or limited by
    size, deduped-topic tombstones kept less than 7 days, fewer replicas or ``min.insync.replicas``
    than the worker would create.

    Raises:
        TopicLayoutError: naming the topic, the setting, its consequence and the command that fixes it.

    """
    warnings: list[str] = []
    for spec in specs:
        have = configs.get(spec.name, {})
        name = spec.name
        policy = {p.strip() for p in have.get("cleanup.policy", "delete").split(",")}
        if spec.role in ("deduped", "changelog") and policy != {"compact"}:
            consequence = (
                "indexers replaying it would miss canonical documents"
                if spec.role == "deduped"
                else "a worker restoring its state from it would lose state"
            )
            raise TopicLayoutError(
                f"topic {name!r} has cleanup.policy={have.get('cleanup.policy', 'delete')} but must be compacted "
                f"only (cleanup.policy=compact): with deletion {consequence}. "
                f"Fix: {_alter(name, 'cleanup.policy=compact')}"
            )
        if spec.role == "index":
            retention = int(have.get("retention.ms", str(INDEX_RETENTION_MS)))
            consequence = (
                "a decide stage stopped (or behind) for longer than that skips the records deleted meanwhile: "
                "their documents are never decided"
            )
            fix = _alter(name, f"retention.ms={INDEX_RETENTION_MS}")
            if 0 <= retention < INDEX_RETENTION_FLOOR_MS:
                raise TopicLayoutError(
                    f"topic {name!r} keeps records {retention} ms (retention.ms): {consequence}. Fix: {fix}"
                )
            if 0 <= retention < INDEX_RETENTION_MS:
                warnings.append(f"topic {name!r} keeps records only {retention / HOUR_MS:.1f} h: {consequence} ({fix})")
            if int(have.get("retention.bytes", "-1")) >= 0:
                warnings.append(
                    f"topic {name!r} has retention.bytes={have['retention.bytes']}: {consequence} "
                    f"({_alter(name, 'retention.bytes=-1')})"
                )
        if spec.role == "deduped":
            kept = int(have.get("delete.retention.ms", str(DAY_MS)))
            wanted = int(DEDUPED_CONFIG["delete.retention.ms"])
            if 0 <= kept < wanted:
                warnings.append(
                    f"topic {name!r} keeps tombstones {kept / HOUR_MS:.0f} h after compaction (delete.retention.ms): "
                    "an indexer replaying it or offline longer than that misses deletions and keeps stale "
                    f"documents ({_alter(name, f'delete.retention.ms={wanted}')})"
                )
        if "segment.ms" in spec.config:  # a meta changelog: the redo journal's dead records
            wanted_ms, wanted_bytes = int(spec.config["segment.ms"]), int(spec.config["segment.bytes"])
            segment_ms = int(have.get("segment.ms", str(7 * DAY_MS)))
            segment_bytes = int(have.get("segment.bytes", str(1 << 30)))
            if segment_ms > wanted_ms or segment_bytes > wanted_bytes:
                fix = _alter(name, f"segment.ms={wanted_ms},segment.bytes={wanted_bytes}")
                warnings.append(
                    f"topic {name!r} closes a segment after {segment_ms / HOUR_MS:.0f} h or {segment_bytes >> 20} MiB "
                    "(segment.ms, segment.bytes): the tombstoned redo journals of the worker's batches (~2 KB a "
                    f"document) stay on the brokers' disks, and are read by every restore, until then ({fix})"
                )
        limit = int(have.get("max.message.bytes", "1048588"))
        fix = _alter(name, f"max.message.bytes={spec.max_message_bytes}")
        if spec.required_message_bytes is not None and limit < spec.required_message_bytes:
            raise TopicLayoutError(
                f"topic {name!r} has max.message.bytes={limit}, below max_doc_bytes ({spec.required_message_bytes}): "
                f"the broker would refuse the worker's records of valid documents. Fix: {fix}, or lower "
                "STREAM_DEDUPE_MAX_DOC_BYTES / --max-doc-bytes"
            )
        if spec.max_message_bytes is not None and limit < spec.max_message_bytes:
            warnings.append(
                f"topic {name!r} has max.message.bytes={limit}: records of documents near max_doc_bytes (plus "
                f"headers, up to {spec.max_message_bytes} bytes) would be refused by the broker ({fix})"
            )
        insync = int(have.get("min.insync.replicas", "1"))
        wanted_insync = int(spec.config.get("min.insync.replicas", "1"))
        if insync < wanted_insync:
            warnings.append(
                f"topic {name!r} has min.insync.replicas={insync}: an acknowledged record may live on one broker "
                f"only ({_alter(name, f'min.insync.replicas={wanted_insync}')})"
            )
    return warnings


async def _wait_visible(admin: AIOKafkaAdminClient, names: list[str], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        counts = await partition_counts(admin, names)
        if all(n in counts for n in names):
            return
        await asyncio.sleep(0.2)
    raise TopicLayoutError(f"topics {names} were created but are not visible after {timeout:.0f}s: check the broker")


async def topic_configs(admin: AIOKafkaAdminClient, names: list[str]) -> dict[str, dict[str, str]]:
    """The configuration entries of each topic (``describe_configs``: ``cleanup.policy``, ``retention.ms``...)."""
    resources = [ConfigResource(ConfigResourceType.TOPIC, n) for n in names]
    out: dict[str, dict[str, str]] = {}
    for response in await admin.describe_configs(resources):
        for resource in response.resources:
            out[resource[3]] = {entry[0]: entry[1] for entry in resource[4]}
    return out


async def prepare_worker_topics(settings: WorkerSettings, wait: float | None = None) -> list[str]:
    """Connect (waiting for the broker), create missing topics, check the layout; the names created."""
    admin = await connect_admin(settings.bootstrap, wait, settings=settings)
    try:
        return await ensure_topics(admin, worker_topics(settings))
    finally:
        await close_quietly(admin)


async def prepare_input_topic(
    bootstrap: str, topic: str, partitions: int, wait: float | None = 30.0, settings: WorkerSettings | None = None
) -> bool:
    """Create the input topic if missing (for ``produce``); True when it was created.

    ``settings`` gives the client's security settings and the replication factor (None: PLAINTEXT,
    the replication factor of ``STREAM_DEDUPE_REPLICATION_FACTOR`` or the default).
    """
    settings = settings or WorkerSettings.load(broker=bootstrap)
    admin = await connect_admin(bootstrap, wait, settings=settings)
    rf = settings.replication_factor
    config = {"min.insync.replicas": str(settings.min_insync_replicas)}
    try:
        return bool(await ensure_topics(admin, [TopicSpec(topic, partitions, config, replication_factor=rf)]))
    finally:
        await close_quietly(admin)
