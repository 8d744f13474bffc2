"""Input documents and output events: the contract shared by the embedded command and the worker.

Parsing never raises on bad input: :func:`parse_document` returns an :class:`Invalid` record
with a reason code, so every input record yields exactly one outcome.
"""

from __future__ import annotations

import re
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
    "too-deep",
    "id-too-long",
    "metadata-too-large",
    "key-mismatch",
    "unprocessable",
    "empty-text",
)

#: orjson's nesting limit: deeper JSON is ``too-deep`` (valid JSON, but not a document).
MAX_JSON_DEPTH = 1024
#: Bytes at the start of an oversize record searched for its id (see :func:`peek_id`).
PEEK_BYTES = 4096
_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[{}\[\]:,]')


@dataclass(frozen=True)
class ParseLimits:
    """Bounds of a valid input record (all in bytes of UTF-8 unless said otherwise).

    Attributes:
        max_doc_bytes: Larger records are ``too-large``.
        max_id_bytes: Longer ids (and Kafka keys) are ``id-too-long``.
        max_metadata_bytes: A ``metadata`` object larger than this once serialized is
            ``metadata-too-large``.
        max_metadata_fields: A ``metadata`` object with more top-level fields is ``metadata-too-large``.

    """

    max_doc_bytes: int = 1 << 20
    max_id_bytes: int = 512
    max_metadata_bytes: int = 64 << 10
    max_metadata_fields: int = 1000

    def __post_init__(self) -> None:
        for name in ("max_doc_bytes", "max_id_bytes", "max_metadata_bytes", "max_metadata_fields"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")


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

    As RFC 3339 allows, ``T`` and ``Z`` may be lower case, and a leap second (``23:59:60Z``)
    is read as the second after ``23:59:59`` (POSIX time has no leap seconds).

    Raises:
        ValueError: if the value is not RFC 3339 or has no time zone.

    """
    if "t" in value or "z" in value:
        value = value.upper()
    leap = 0
    if value[16:19] == ":60":  # YYYY-MM-DDTHH:MM:60
        value, leap = f"{value[:17]}59{value[19:]}", 1_000_000
    parsed = datetime.fromisoformat(value)
    if parsed.tzinfo is None:
        raise ValueError("no time zone")
    delta = parsed.astimezone(UTC) - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds + leap


def parse_document(raw: bytes, max_bytes: int, limits: ParseLimits | None = None) -> Document | Invalid | Deletion:
    """Validate one input record.

    Args:
        raw: The record's bytes (one JSON line, without the newline).
        max_bytes: Records larger than this are rejected as ``too-large``.
        limits: The other bounds (id length, metadata size); None: the defaults of
            :class:`ParseLimits` (``max_bytes`` always wins over ``limits.max_doc_bytes``).

    Returns:
        A :class:`Document`, a :class:`Deletion` (``"deleted": true``), or an :class:`Invalid`
        saying why not.

    """
    limits = limits or _DEFAULT_LIMITS
    if len(raw) > max_bytes:
        return too_large(raw, len(raw), max_bytes, "--max-doc-bytes")
    try:
        value = orjson.loads(raw)  # also rejects invalid UTF-8; the check below names the cause
    except orjson.JSONDecodeError as exc:
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as utf8:
            return Invalid("invalid-utf8", f"record is not valid UTF-8 at byte {utf8.start}", peek_id(raw))
        if "depth limit" in str(exc):  # orjson's own check: no second pass over the bytes
            return Invalid(
                "too-deep", f"record nests JSON deeper than {MAX_JSON_DEPTH} levels: flatten it", peek_id(raw)
            )
        return Invalid("not-json", f"record is not JSON: {exc}", peek_id(raw))
    if not isinstance(value, dict):
        return Invalid("not-object", f"record must be a JSON object, got {json_type(value)}")
    return _validate_object(value, raw, limits)


def parse_line(raw: bytes, max_bytes: int) -> Document | Invalid | Deletion:
    """:func:`parse_document` of one input line of a JSONL file; a blank line is ``not-json``."""
    if not raw.strip():
        return Invalid("not-json", "empty line (every line must be one JSON document)")
    return parse_document(raw, max_bytes)


def too_large(raw: bytes, size: int, limit: int, setting: str) -> Invalid:
    """The ``too-large`` outcome of a record of ``size`` bytes (its id recovered from ``raw`` when cheap)."""
    return Invalid("too-large", f"record is {size} bytes, over the limit of {limit} ({setting})", peek_id(raw))


def peek_id(raw: bytes, limit: int = PEEK_BYTES) -> str | None:
    """The top-level ``"id"`` string of a JSON object, read from its first ``limit`` bytes only.

    For records that are not parsed (too large, too deep, not JSON, not UTF-8): a tokenizer over
    the prefix tracks the nesting depth, so an ``"id"`` inside ``metadata`` is never taken. None
    when the id is not a plain (valid UTF-8) string within the prefix.
    """
    head = raw[:limit]
    depth = 0
    expect_value = False
    key: bytes | None = None
    for match in _TOKEN.finditer(head):
        token = match.group()
        if token in (b"{", b"["):
            depth += 1
            expect_value = False
        elif token in (b"}", b"]"):
            depth -= 1
        elif token == b":":
            expect_value = True
        elif token == b",":
            key, expect_value = None, False
        elif depth == 1:
            if expect_value and key == b'"id"':
                try:
                    found = orjson.loads(token)
                except orjson.JSONDecodeError:
                    return None
                return found if isinstance(found, str) and found else None
            if not expect_value:
                key = token
    return None


def parse_keyed(key: bytes | None, raw: bytes | None, limits: ParseLimits) -> Document | Invalid | Deletion:
    """Validate a Kafka record: the key, when present, is the document's identity.

    The rule (README, "Identity"): a tombstone (``raw`` None) deletes the id of its key; a value
    without an ``id`` takes the key's; a value whose ``id`` differs from the key is
    ``key-mismatch`` (a dead letter: the crawler must send one identity); without a key the
    JSON ``id`` is the identity, as in the embedded command.
    """
    key_id: str | None = None
    if key:
        try:
            key_id = key.decode("utf-8")
        except UnicodeDecodeError:
            return Invalid("invalid-utf8", "the Kafka key is not UTF-8: keys must be document ids")
        if len(key) > limits.max_id_bytes:
            return _id_too_long(len(key), limits, "the Kafka key")
    if raw is None:
        if key_id is None:
            return Invalid("missing-id", "a tombstone (null value) needs the document id as its Kafka key")
        return Deletion(key_id)
    parsed = parse_document(raw, limits.max_doc_bytes, limits)
    if key_id is None:
        return parsed
    if isinstance(parsed, Invalid):
        if parsed.reason == "missing-id" and raw.lstrip()[:1] == b"{":
            return _with_key_id(raw, key_id, limits)
        return Invalid(parsed.reason, parsed.detail, key_id)
    if parsed.doc_id != key_id:
        return Invalid(
            "key-mismatch",
            f"the Kafka key {key_id[:80]!r} and the JSON id {parsed.doc_id[:80]!r} differ: the key is the document's "
            "identity (deletes are by key); send the same id in both, or leave the JSON id out",
            key_id,
        )
    return parsed


def _with_key_id(raw: bytes, key_id: str, limits: ParseLimits) -> Document | Invalid | Deletion:
    """A JSON object without an ``id``: validated as if its id were the Kafka key."""
    value = orjson.loads(raw)
    if "id" in value and value["id"] not in (None, ""):
        return Invalid("missing-id", 'record has no "id" (a non-empty string is required)', key_id)
    value["id"] = key_id
    parsed = _validate_object(value, raw, limits)
    if isinstance(parsed, Invalid) and parsed.doc_id is None:
        return Invalid(parsed.reason, parsed.detail, key_id)
    return parsed


def _id_too_long(size: int, limits: ParseLimits, what: str) -> Invalid:
    limit = limits.max_id_bytes
    return Invalid("id-too-long", f"{what} is {size} bytes, over the limit of {limit} (max_id_bytes): use shorter ids")


def json_type(value: object) -> str:
    """The JSON name of a decoded value's type (``null``, ``string``, ``number``, ...), for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object" if isinstance(value, dict) else type(value).__name__


def _missing(name: str, value: dict[str, Any]) -> str:
    """``record has no "name"``, or that it is null or empty."""
    if name not in value:
        return f'record has no "{name}"'
    return f'"{name}" is null' if value[name] is None else f'"{name}" is empty'


def _validate_object(value: dict[str, Any], raw: bytes, limits: ParseLimits) -> Document | Invalid | Deletion:
    doc_id = value.get("id")
    if doc_id is None or doc_id == "":
        return Invalid("missing-id", f"{_missing('id', value)} (a non-empty string is required)")
    if not isinstance(doc_id, str):
        return Invalid("bad-id", f'"id" must be a string, got {json_type(doc_id)}')
    id_bytes = len(doc_id.encode("utf-8", "surrogatepass"))
    if id_bytes > limits.max_id_bytes:
        return _id_too_long(id_bytes, limits, '"id"')
    deleted = value.get("deleted")
    if deleted is True:
        return Deletion(doc_id)
    if deleted is not None and deleted is not False:  # "yes", 1, "true": say so, never index or drop it
        return Invalid(
            "bad-field", f'"deleted" must be true (the document is gone) or false, got {json_type(deleted)}', doc_id
        )
    text = value.get("text")
    if text is None:
        return Invalid("missing-text", f"{_missing('text', value)} (a string is required)", doc_id)
    if not isinstance(text, str):
        return Invalid("bad-text", f'"text" must be a string, got {json_type(text)}', doc_id)
    for name in _OPTIONAL_STRINGS:
        field = value.get(name)
        if field is not None and not isinstance(field, str):
            return Invalid("bad-field", f'"{name}" must be a string, got {json_type(field)}', doc_id)
    metadata = value.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        return Invalid("bad-field", f'"metadata" must be an object, got {json_type(metadata)}', doc_id)
    if metadata:
        too_big = _metadata_problem(metadata, limits)
        if too_big:
            return Invalid("metadata-too-large", too_big, doc_id)
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


def _metadata_problem(metadata: dict[str, Any], limits: ParseLimits) -> str | None:
    if len(metadata) > limits.max_metadata_fields:
        return (
            f'"metadata" has {len(metadata)} fields, over the limit of {limits.max_metadata_fields} '
            "(max_metadata_fields): keep metadata small, it is republished with every canonical document"
        )
    size = len(orjson.dumps(metadata))
    if size > limits.max_metadata_bytes:
        return (
            f'"metadata" is {size} bytes, over the limit of {limits.max_metadata_bytes} (max_metadata_bytes): keep '
            "metadata small, it is republished with every canonical document"
        )
    return None


_DEFAULT_LIMITS = ParseLimits()
