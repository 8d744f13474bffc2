"""Outputs of the decide stage that always fit their topics, and its test-only poison hook.

See :mod:`stream_dedupe.worker.sizes` for the limits; a record that its topic would refuse
becomes a dead letter (``output-too-large``) here rather than an exception at publish time.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from stream_dedupe.core.records import Invalid, Record
from stream_dedupe.worker.metrics import WorkerMetrics
from stream_dedupe.worker.settings import WorkerSettings
from stream_dedupe.worker.sizes import TopicLimits, dead_letter

log = logging.getLogger("stream_dedupe.worker")

Output = tuple[str, bytes | None, bytes | None, Any]


def poison_fault(records: list[Record]) -> None:
    """Fault injection for the poison-record test: ``STREAM_DEDUPE_FAULT=poison:<id>`` fails on that document.

    Never set in production: the engine has no input known to fail, so the test makes one.
    """
    fault = os.environ.get("STREAM_DEDUPE_FAULT", "")
    if fault.startswith("poison:"):
        doc_id = fault.removeprefix("poison:")
        if any(getattr(r, "doc_id", None) == doc_id and not isinstance(r, Invalid) for r in records):
            raise RuntimeError(f"fault injection: document {doc_id!r} cannot be processed")


def short_key(s: WorkerSettings, key: bytes | None) -> bytes | None:
    """An input key as the key of an output (a key over ``max_id_bytes`` is cut: it is invalid anyway)."""
    return key if key is None or len(key) <= s.max_id_bytes + 1 else key[: s.max_id_bytes + 1]


def origin_of(headers: Any) -> dict[str, Any]:
    """The input record an output came from, read from its ``sd-origin`` header (empty if none)."""
    for key, value in headers or ():
        if key == "sd-origin":
            topic, partition, offset = value.decode().rsplit("/", 2)
            return {"topic": topic, "partition": int(partition), "offset": int(offset)}
    return {}


def fit_outputs(
    settings: WorkerSettings, sizes: TopicLimits, metrics: WorkerMetrics, outputs: list[Output]
) -> list[Output]:
    """Every output that its topic would refuse becomes a dead letter (``output-too-large``)."""
    out = []
    for topic, key, value, headers in outputs:
        if sizes.fits(topic, key, value, headers or ()):
            out.append((topic, key, value, headers))
            continue
        limit = sizes.max_bytes(topic)
        detail = (
            f"a {len(value or b'')}-byte record for topic {topic} is over its max.message.bytes ({limit}); it is "
            "dead-lettered instead (raise the topic's max.message.bytes to receive such records)"
        )
        log.error("%s", detail)
        metrics.oversize_outputs.labels(topic).inc()
        letter = dead_letter(settings, sizes, "output-too-large", detail, origin_of(headers), key, value or b"")
        out.append((settings.dlq_topic, short_key(settings, key), letter, headers))
    return out


def invalid_letter(settings: WorkerSettings, sizes: TopicLimits, event: dict[str, Any], origin: Any) -> bytes:
    """The DLQ record of an invalid input record: its bytes (up to a bound), size, hash, reason and origin.

    ``origin``: the record's :class:`~stream_dedupe.worker.index_records.Origin`.
    """
    return dead_letter(
        settings,
        sizes,
        event["reason"],
        event["detail"],
        origin.as_dict(),
        origin.key,
        origin.value or b"",
        origin.size,
        origin.sha256,
        event.get("id"),
    )
