from __future__ import annotations

import orjson
import pytest

from stream_dedupe.core.records import (
    Deletion,
    Document,
    Invalid,
    ParseLimits,
    parse_document,
    parse_keyed,
    parse_timestamp,
    peek_id,
)


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"\xff\xfe{}", "invalid-utf8"),
        (b"{not json", "not-json"),
        (b"[1, 2]", "not-object"),
        (b'{"text": "x"}', "missing-id"),
        (b'{"id": "", "text": "x"}', "missing-id"),
        (b'{"id": 5, "text": "x"}', "bad-id"),
        (b'{"id": "a"}', "missing-text"),
        (b'{"id": "a", "text": 3}', "bad-text"),
        (b'{"id": "a", "text": "x", "url": 1}', "bad-field"),
        (b'{"id": "a", "text": "x", "metadata": []}', "bad-field"),
        (b'{"id": "a", "text": "x", "updated_at": "yesterday"}', "bad-updated-at"),
        (b'{"id": "a", "text": "x", "updated_at": "2024-01-01T00:00:00"}', "bad-updated-at"),
        (b'{"id": "a", "text": "' + b"x" * 200 + b'"}', "too-large"),
    ],
)
def test_bad_records_have_reasons(raw: bytes, reason: str) -> None:
    result = parse_document(raw, 128)
    assert isinstance(result, Invalid)
    assert result.reason == reason
    assert result.detail


@pytest.mark.parametrize(
    ("raw", "reason", "detail"),
    [
        (b"null", "not-object", "record must be a JSON object, got null"),
        (b"[1]", "not-object", "record must be a JSON object, got an array"),
        (b'{"id": "", "text": "x"}', "missing-id", '"id" is empty (a non-empty string is required)'),
        (b'{"text": "x"}', "missing-id", 'record has no "id" (a non-empty string is required)'),
        (b'{"id": 5, "text": "x"}', "bad-id", '"id" must be a string, got a number'),
        (b'{"id": "a", "text": null}', "missing-text", '"text" is null (a string is required)'),
        (b'{"id": "a", "text": ["x"]}', "bad-text", '"text" must be a string, got an array'),
        (
            b'{"id": "a", "text": "x", "deleted": "yes"}',
            "bad-field",
            '"deleted" must be true (the document is gone) or false, got a string',
        ),
        (
            b'{"id": "a", "deleted": "true"}',
            "bad-field",
            '"deleted" must be true (the document is gone) or false, got a string',
        ),
        (
            b'{"id": "a", "deleted": 1}',
            "bad-field",
            '"deleted" must be true (the document is gone) or false, got a number',
        ),
    ],
)
def test_details_name_the_json_types_and_a_bad_deletion_marker_is_no_document(
    raw: bytes, reason: str, detail: str
) -> None:
    result = parse_document(raw, 1024)
    assert isinstance(result, Invalid) and (result.reason, result.detail) == (reason, detail)


def test_deleted_false_is_a_document_and_true_a_deletion() -> None:
    assert isinstance(parse_document(b'{"id": "a", "text": "x", "deleted": false}', 1024), Document)
    assert parse_document(b'{"id": "a", "deleted": true}', 1024) == Deletion("a")


def test_valid_document() -> None:
    raw = b'{"id": "a", "text": "x", "source": "wiki", "updated_at": "2024-05-01T12:00:00+02:00", "metadata": {}}'
    result = parse_document(raw, 1024)
    assert isinstance(result, Document)
    assert result.updated_at_us == parse_timestamp("2024-05-01T10:00:00Z")
    assert result.source == "wiki" and result.raw == raw


def test_rfc3339_lower_case_separators_and_leap_seconds() -> None:
    """RFC 3339 (section 5.6) allows "t" and "z" in lower case, and second 60 (a leap second)."""
    assert parse_timestamp("2026-12-07t12:00:00z") == parse_timestamp("2026-12-07T12:00:00Z")
    assert parse_timestamp("2026-12-07t13:00:00+01:00") == parse_timestamp("2026-12-07T12:00:00Z")
    # the leap second at the end of 2016 is the instant after 23:59:59, in any offset
    assert parse_timestamp("2016-12-31T23:59:60Z") == parse_timestamp("2017-01-01T00:00:00Z")
    assert parse_timestamp("2016-12-31T18:59:60.5-05:00") == parse_timestamp("2017-01-01T00:00:00.5Z")
    doc = parse_document(b'{"id": "a", "text": "x", "updated_at": "2016-12-31t23:59:60z"}', 1024)
    assert isinstance(doc, Document) and doc.updated_at_us == parse_timestamp("2017-01-01T00:00:00Z")
    for bad in ("2026-12-07T12:00:61Z", "2026-12-07T12:00:00", "yesterday"):
        with pytest.raises(ValueError):
            parse_timestamp(bad)


# ---------------------------------------------------------------- bounds (issue 13) ----
def test_json_bomb_is_too_deep_not_not_json() -> None:
    bomb = b'{"id": "bomb", "text": "x", "metadata": {"a": ' + b"[" * 10_000 + b"]" * 10_000 + b"}}"
    result = parse_document(bomb, 1 << 20)
    assert isinstance(result, Invalid) and result.reason == "too-deep"
    assert result.doc_id == "bomb"  # read cheaply from the first bytes
    assert isinstance(parse_document(b"[" * 10_000, 1 << 20), Invalid)
    assert parse_document(b"{" * 5000, 1 << 20).reason == "not-json"  # type: ignore[union-attr]  # invalid, not deep


def test_id_length_is_bounded() -> None:
    limits = ParseLimits(max_id_bytes=16)
    assert isinstance(parse_document(orjson.dumps({"id": "a" * 16, "text": "x"}), 1 << 20, limits), Document)
    result = parse_document(orjson.dumps({"id": "é" * 9, "text": "x"}), 1 << 20, limits)  # 18 bytes
    assert isinstance(result, Invalid) and result.reason == "id-too-long" and "18 bytes" in result.detail
    default = parse_document(orjson.dumps({"id": "i" * 513, "text": "x"}), 1 << 20)
    assert isinstance(default, Invalid) and default.reason == "id-too-long"


def test_metadata_is_bounded_by_fields_and_bytes() -> None:
    many = orjson.dumps({"id": "m", "text": "x", "metadata": {f"f{i}": i for i in range(50_000)}})
    result = parse_document(many, 1 << 20)
    assert isinstance(result, Invalid) and result.reason == "metadata-too-large" and "50000 fields" in result.detail
    assert result.doc_id == "m"
    big = orjson.dumps({"id": "m", "text": "x", "metadata": {"blob": "y" * 70_000}})
    result = parse_document(big, 1 << 20)
    assert isinstance(result, Invalid) and result.reason == "metadata-too-large" and "bytes" in result.detail
    fine = orjson.dumps({"id": "m", "text": "x", "metadata": {"blob": "y" * 1000, "n": 1}})
    assert isinstance(parse_document(fine, 1 << 20), Document)


def test_too_large_recovers_the_top_level_id_cheaply() -> None:
    raw = orjson.dumps({"metadata": {"id": "nested"}, "id": 'top "quoted"', "text": "x" * 10_000})
    result = parse_document(raw, 1000)
    assert isinstance(result, Invalid) and result.reason == "too-large" and result.doc_id == 'top "quoted"'
    late = orjson.dumps({"text": "x" * 10_000, "id": "after-the-text"})
    assert parse_document(late, 1000).doc_id is None  # type: ignore[union-attr]  # beyond the peeked prefix
    assert peek_id(b'{"metadata": {"id": "nested"}}') is None
    assert peek_id(b"not json at all") is None


def test_a_broken_record_keeps_its_readable_id() -> None:
    """Not JSON or not UTF-8, its top-level id still names it (a crawler can find the page to fix)."""
    cut = parse_document(b'{"id": "d2", "text": "broken', 1 << 20)
    assert isinstance(cut, Invalid) and (cut.reason, cut.doc_id) == ("not-json", "d2")
    latin = parse_document(b'{"id": "d3", "text": "caf\xe9"}', 1 << 20)
    assert isinstance(latin, Invalid) and (latin.reason, latin.doc_id) == ("invalid-utf8", "d3")
    bad_id = parse_document(b'{"id": "\xff", "text": "x"}', 1 << 20)
    assert isinstance(bad_id, Invalid) and bad_id.doc_id is None  # an id that is not UTF-8 names nothing
    nested = parse_document(b'{"metadata": {"id": "inner"}, "text": ', 1 << 20)
    assert isinstance(nested, Invalid) and nested.doc_id is None


def test_the_kafka_key_is_the_identity() -> None:
    limits = ParseLimits()
    same = parse_keyed(b"a", b'{"id": "a", "text": "x"}', limits)
    assert isinstance(same, Document) and same.doc_id == "a"
    no_id = parse_keyed(b"k", b'{"text": "x"}', limits)
    assert isinstance(no_id, Document) and no_id.doc_id == "k"
    mismatch = parse_keyed(b"key-A", b'{"id": "json-B", "text": "x"}', limits)
    assert isinstance(mismatch, Invalid) and mismatch.reason == "key-mismatch" and mismatch.doc_id == "key-A"
    assert "key-A" in mismatch.detail and "json-B" in mismatch.detail
    assert parse_keyed(b"key-A", None, limits) == Deletion("key-A")  # a tombstone deletes its key's id
    flagged = parse_keyed(b"key-A", b'{"id": "json-B", "deleted": true}', limits)
    assert isinstance(flagged, Invalid) and flagged.reason == "key-mismatch"
    assert parse_keyed(b"key-A", b'{"deleted": true}', limits) == Deletion("key-A")
    assert parse_keyed(None, b'{"id": "j", "text": "x"}', limits).doc_id == "j"  # type: ignore[union-attr]
    bad = parse_keyed(b"k", b'{"text": 5}', limits)
    assert isinstance(bad, Invalid) and bad.reason == "bad-text" and bad.doc_id == "k"
    assert parse_keyed(b"\xff", b'{"id": "a", "text": "x"}', limits).reason == "invalid-utf8"  # type: ignore[union-attr]
    assert parse_keyed(None, None, limits).reason == "missing-id"  # type: ignore[union-attr]
    long_key = parse_keyed(b"k" * 600, None, limits)
    assert isinstance(long_key, Invalid) and long_key.reason == "id-too-long"
