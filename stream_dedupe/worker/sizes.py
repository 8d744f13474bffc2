"""Size-aware output: the topics' real ``max.message.bytes``, and records that always fit them.

A broker refuses a record batch larger than its topic's ``max.message.bytes`` (after
compression). A refused output used to kill the stage, and the restarted worker met the same
record again: a crash loop. Here every limit is read from the broker at start-up, and

* the sign stage turns a document that could not be forwarded, republished as a canonical or
  written to the state's changelog into a ``too-large`` outcome (:meth:`TopicLimits.doc_limit`);
* dead letters carry a payload truncated to what fits, with the original size and SHA-256
  (:func:`dead_letter`);
* any other output that does not fit (a huge cluster event) becomes a dead letter
  (``output-too-large``) instead of an exception (:func:`fit_outputs`).

Sizes are checked uncompressed (a record batch never grows by compression), so the outcome
does not depend on how well a record compresses: the same input gives the same events on every
run. Compression (``compression_type``) then only saves bandwidth and disk.
"""

from __future__ import annotations

import base64
import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from stream_dedupe.storage.base import NAMESPACES
from stream_dedupe.worker.settings import WorkerSettings

log = logging.getLogger("stream_dedupe.worker.sizes")

#: Version of the dead-letter record format (``"version"`` field; schema/dlq.schema.json).
DLQ_VERSION = 2
#: Kafka's own default of ``message.max.bytes`` (used when the broker cannot be asked).
KAFKA_DEFAULT_MAX = 1_048_588
#: Room kept below a limit for the batch and record framing of one record.
FRAMING = 61 + 21  # the v2 batch header, and the most a record adds around its key, value and headers

Headers = Sequence[tuple[str, bytes]]


def record_bytes(key: bytes | None, value: bytes | None, headers: Headers = ()) -> int:
    """Upper bound of the size of a one-record batch holding this record, uncompressed.

    aiokafka's ``DefaultRecordBatchBuilder.estimate_size_in_bytes`` plus at most a few bytes: every
    length varint is counted at its largest (5 bytes) instead of being computed. Called for every
    record the worker sends (several per document); the exact estimate was ~2% of a worker's CPU.
    """
    size = FRAMING + 15 + (len(key) if key is not None else 0) + (len(value) if value is not None else 0)
    for name, data in headers:
        size += 10 + len(name.encode("utf-8")) + (len(data) if data is not None else 0)
    return size


def changelog_topics(settings: WorkerSettings) -> dict[str, str]:
    """Namespace -> changelog topic of the state's Faust tables (``<app_id>-state-<ns>-changelog``)."""
    return {ns: f"{settings.app_id}-state-{ns}-changelog" for ns in NAMESPACES}


@dataclass
class TopicLimits:
    """``max.message.bytes`` of each topic the worker writes.

    Attributes:
        limits: Topic -> its ``max.message.bytes``.
        default: The broker's ``message.max.bytes`` (topics not created yet get it).

    """

    limits: dict[str, int] = field(default_factory=dict)
    default: int = KAFKA_DEFAULT_MAX

    def max_bytes(self, topic: str) -> int:
        """The largest record batch ``topic`` accepts."""
        return self.limits.get(topic, self.default)

    def fits(self, topic: str, key: bytes | None, value: bytes | None, headers: Headers = ()) -> bool:
        """True when the record, alone in a batch, is accepted by ``topic`` even uncompressed."""
        return record_bytes(key, value, headers) <= self.max_bytes(topic)

    def doc_limit(self, settings: WorkerSettings) -> tuple[int, str]:
        """The largest document the worker can carry everywhere, and the setting that sets it.

        A document travels as a value to the index topic (with headers: signature, origin), to
        the deduped topic and to the ``documents`` changelog, each time keyed by its id.
        """
        room = FRAMING + settings.max_id_bytes + 1024  # key, and the forward's headers (origin, signature)
        room += 4 * (settings.num_perm or 128)
        bounds = [(settings.max_doc_bytes, "max_doc_bytes")]
        documents = changelog_topics(settings)["documents"]
        for topic in (settings.index_topic, settings.deduped_topic, documents):
            bounds.append((self.max_bytes(topic) - room, f"max.message.bytes of topic {topic}"))
        return min(bounds)


async def read_topic_limits(settings: WorkerSettings) -> TopicLimits:
    """Read ``max.message.bytes`` of the worker's topics (and the broker default) with the admin client."""
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType  # type: ignore[import-untyped]

    from stream_dedupe.worker.admin import connect_admin

    topics = [settings.index_topic, settings.events_topic, settings.deduped_topic, settings.dlq_topic]
    topics += list(changelog_topics(settings).values())
    admin = await connect_admin(settings.bootstrap, None, settings=settings)
    out = TopicLimits()
    try:
        existing = set(await admin.list_topics())
        brokers = [ConfigResource(ConfigResourceType.BROKER, str(b.nodeId)) for b in admin._client.cluster.brokers()]
        topics = [ConfigResource(ConfigResourceType.TOPIC, t) for t in topics if t in existing]
        for resources in (brokers[:1], topics):  # the broker default first: topics override it
            if not resources:
                continue
            try:
                responses = await admin.describe_configs(resources)
            except Exception as exc:  # e.g. no DescribeConfigs permission: Kafka's defaults, said once
                log.warning("cannot read max.message.bytes (%r): assuming Kafka's default %d", exc, out.default)
                continue
            for response in responses:
                for resource in response.resources:
                    entries = {entry[0]: entry[1] for entry in resource[4]}
                    if resource[2] == ConfigResourceType.BROKER.value:
                        out.default = int(entries.get("message.max.bytes") or out.default)
                    elif entries.get("max.message.bytes"):
                        out.limits[resource[3]] = int(entries["max.message.bytes"])
    finally:
        await admin.close()
    log.info("topic size limits (max.message.bytes): %s; broker default %d", out.limits, out.default)
    return out


def dead_letter(
    settings: WorkerSettings,
    limits: TopicLimits,
    reason: str,
    detail: str,
    origin: dict[str, Any],
    key: bytes | None,
    payload: bytes,
    size: int | None = None,
    sha256: str | None = None,
    doc_id: str | None = None,
) -> bytes:
    """A dead-letter record that always fits the DLQ topic.

    Args:
        settings: Worker settings (``dlq_max_payload_bytes``, the DLQ topic).
        limits: The topics' limits.
        reason: The ``invalid`` reason (or ``output-too-large``).
        detail: What is wrong and how to fix it.
        origin: ``topic``, ``partition``, ``offset`` of the input record (the full original is there
            while the topic's retention keeps it).
        key: The input record's Kafka key.
        payload: The original bytes, or a prefix of them (the sign stage forwards a prefix of
            records too large to forward).
        size: The original size when ``payload`` is a prefix (None: ``len(payload)``).
        sha256: The original's SHA-256 hex digest when ``payload`` is a prefix.
        doc_id: The document id when known.

    """
    size = len(payload) if size is None else size
    sha256 = sha256 or hashlib.sha256(payload).hexdigest()
    key_text = key.decode("utf-8", "replace")[: settings.max_id_bytes + 1] if key is not None else None
    head: dict[str, Any] = {
        "version": DLQ_VERSION,
        "reason": reason,
        "detail": detail[:2000],
        **origin,
        "key": key_text,
        "id": doc_id[: settings.max_id_bytes + 1] if doc_id else None,
        "size": size,
        "sha256": sha256,
    }
    room = limits.max_bytes(settings.dlq_topic) - FRAMING - min(len(key or b""), settings.max_id_bytes + 1)
    room -= len(orjson.dumps(head)) + 256 + 64  # the fields below, the sd-origin header
    keep = max(min(settings.dlq_max_payload_bytes, room * 3 // 4, len(payload)), 0)
    head["truncated"] = keep < size
    head["value_b64"] = base64.b64encode(payload[:keep]).decode()
    return orjson.dumps(head)


def compressed_size(value: bytes, compression: str | None) -> int:
    """Bytes of ``value`` compressed as the producer would (``compression``: aiokafka's type, None: none)."""
    from aiokafka import codec  # type: ignore[import-untyped]

    encoders = {"gzip": codec.gzip_encode, "lz4": codec.lz4_encode, "zstd": codec.zstd_encode}
    encode = encoders.get(compression or "")
    if encode is None:
        return len(value)
    return len(encode(value))
