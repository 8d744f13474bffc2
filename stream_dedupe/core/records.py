"""Input documents and output events: the contract shared by the embedded command and the worker.

Parsing never raises on bad input: :func:`parse_document` returns an :class:`Invalid` record
with a reason code, so every input record yields exactly one outcome.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

#: Reason codes of ``invalid`` events (and of the dead-letter records of the worker).
INVALID_REASONS = (
    "invalid-utf8",
    "not-json",
    "not-object",
    "missing-id",
    "bad-id",
    "missing-text",
    "bad-text",
    "bad-field",
    "bad-updated-at",
    "too-large",
    "empty-text",
)

_OPTIONAL_STRINGS = ("url", "title", "source")


@dataclass(frozen=True)
class Document:
    """A valid input document.

    Attributes:
        doc_id: The ``id`` field.
        text: The ``text`` field.
        updated_at_us: ``updated_at`` in microseconds since the epoch, or None.
        source: The ``source`` field, or None.
        raw: The original JSON bytes (republished unchanged when canonical).
        title: The ``title`` field, or None.

    """

    doc_id: str
    text: str
    updated_at_us: int | None
    source: str | None
    raw: bytes
    title: str | None = None


@dataclass(frozen=True)
class Invalid:
    """An input record that is not a valid document.

    Attributes:
        reason: One of :data:`INVALID_REASONS`.
        detail: A sentence saying what is wrong and how to fix it.
        doc_id: The id when it could be read, else None.

    """

    reason: str
    detail: str
    doc_id: str | None = None


@dataclass(frozen=True)
class Deletion:
    """The document is gone (a Kafka tombstone, or ``"deleted": true``).

    Attributes:
        doc_id: The document id.

    """

    doc_id: str


Record = Document | Invalid | Deletion


def parse_timestamp(value: str) -> int:
    """Parse an RFC 3339 timestamp with a time zone into microseconds since the epoch.

    Raises:
        ValueError: if the value is not RFC 3339 or has no time zone.

    """
    parsed = datetime.fromisoformat(value)
    if parsed.tzinfo is None:
        raise ValueError("no time zone")
    delta = parsed.astimezone(UTC) - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def parse_document(raw: bytes, max_bytes: int) -> Document | Invalid | Deletion:
    """Validate one input record.

    Args:
        raw: The record's bytes (one JSON line, without the newline).
        max_bytes: Records larger than this are rejected as ``too-large``.

    Returns:
        A :class:`Document`, a :class:`Deletion` (``"deleted": true``), or an :class:`Invalid`
        saying why not.

    """
    if len(raw) > max_bytes:
        return Invalid("too-large", f"record is {len(raw)} bytes, over the limit of {max_bytes} (--max-doc-bytes)")
    try:
        value = orjson.loads(raw)  # also rejects invalid UTF-8; the check below names the cause
    except orjson.JSONDecodeError as exc:
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as utf8:
            return Invalid("invalid-utf8", f"record is not valid UTF-8 at byte {utf8.start}")
        return Invalid("not-json", f"record is not JSON: {exc}")
    if not isinstance(value, dict):
        return Invalid("not-object", f"record must be a JSON object, got {type(value).__name__}")
    return _validate_object(value, raw)


def _validate_object(value: dict[str, Any], raw: bytes) -> Document | Invalid | Deletion:
    doc_id = value.get("id")
    if doc_id is None or doc_id == "":
        return Invalid("missing-id", 'record has no "id" (a non-empty string is required)')
    if not isinstance(doc_id, str):
        return Invalid("bad-id", f'"id" must be a string, got {type(doc_id).__name__}')
    if value.get("deleted") is True:
        return Deletion(doc_id)
    text = value.get("text")
    if text is None:
        return Invalid("missing-text", 'record has no "text" (a string is required)', doc_id)
    if not isinstance(text, str):
        return Invalid("bad-text", f'"text" must be a string, got {type(text).__name__}', doc_id)
    for name in _OPTIONAL_STRINGS:
        field = value.get(name)
        if field is not None and not isinstance(field, str):
            return Invalid("bad-field", f'"{name}" must be a string, got {type(field).__name__}', doc_id)
    metadata = value.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        return Invalid("bad-field", f'"metadata" must be an object, got {type(metadata).__name__}', doc_id)
    updated_at_us = None
    updated_at = value.get("updated_at")
    if updated_at is not None:
        if not isinstance(updated_at, str):
            return Invalid("bad-updated-at", '"updated_at" must be an RFC 3339 string', doc_id)
        try:
            updated_at_us = parse_timestamp(updated_at)
        except ValueError:
            return Invalid(
                "bad-updated-at",
                f'"updated_at" {updated_at!r} is not RFC 3339 with a time zone (e.g. 2024-05-01T12:00:00Z)',
                doc_id,
            )
    return Document(doc_id, text, updated_at_us, value.get("source"), raw, value.get("title"))
