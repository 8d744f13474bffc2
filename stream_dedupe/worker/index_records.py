"""Index-topic records as the engine's input: where each came from, its record, its signature.

The sign stage (:mod:`stream_dedupe.worker.sign`) forwards every input record to the index
topic with headers: its origin (``sd-topic``, ``sd-partition``, ``sd-offset``, ``sd-ts``), its
encoded signature (``sd-signed``), a deletion mark (``sd-deleted``) or the outcome it judged
itself for a record too large to forward (``sd-invalid``, ``sd-detail``, ``sd-id``, ``sd-size``,
``sd-sha256``). The decide stage (:mod:`stream_dedupe.worker.pipeline`) reads them back here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from stream_dedupe.core.engine import DedupeEngine
from stream_dedupe.core.records import Invalid, ParseLimits, Record, parse_keyed
from stream_dedupe.core.signer import Signed
from stream_dedupe.worker.sign import SIGNED_HEADER


@dataclass
class Origin:
    """Where an index record came from (the input record it forwards)."""

    topic: str
    partition: int
    offset: int
    timestamp: float | None
    key: bytes | None
    value: bytes | None
    #: Size and SHA-256 of the original value when the sign stage forwarded only a prefix.
    size: int | None = None
    sha256: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """``topic``, ``partition`` and ``offset``: the origin an ``invalid`` event names."""
        return {"topic": self.topic, "partition": self.partition, "offset": self.offset}


def origin_of(m: Any) -> Origin:
    """The input record an index record forwards (or the record itself, written to the index directly)."""
    h = dict(m.headers or ())
    if "sd-offset" in h:
        ts = int(h["sd-ts"]) / 1000.0 if "sd-ts" in h else m.timestamp / 1000.0
        origin = Origin(h["sd-topic"].decode(), int(h["sd-partition"]), int(h["sd-offset"]), ts, m.key, m.value)
        if "sd-size" in h:
            origin.size, origin.sha256 = int(h["sd-size"]), h["sd-sha256"].decode()
        return origin
    ts = m.timestamp / 1000.0 if m.timestamp and m.timestamp > 0 else None
    return Origin(m.topic, m.partition, m.offset, ts, m.key, m.value)  # not routed (written directly)


def signature_of(engine: DedupeEngine, m: Any) -> Signed | None:
    """The record's signature from the sign stage, if made with the engine's parameters."""
    for key, value in m.headers or ():
        if key == SIGNED_HEADER:
            return engine.signer.decode(value)
    return None


def record_of(m: Any, limits: ParseLimits) -> Record:
    """The engine's record of an index record (the sign stage's own outcome, a deletion, or the parsed document)."""
    headers = m.headers or ()
    for key, value in headers:
        if key == "sd-invalid":  # judged by the sign stage (too large to forward); the value is a prefix
            h = dict(headers)
            doc_id = h["sd-id"].decode("utf-8", "replace") if "sd-id" in h else None
            return Invalid(value.decode(), h.get("sd-detail", b"").decode("utf-8", "replace"), doc_id)
    if any(k == "sd-deleted" for k, _ in headers):
        return parse_keyed(m.key, None, limits)
    return parse_keyed(m.key, m.value or b"", limits)
