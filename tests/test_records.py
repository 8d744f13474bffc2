from __future__ import annotations

import pytest

from stream_dedupe.core.records import Document, Invalid, parse_document, parse_timestamp


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


def test_valid_document() -> None:
    raw = b'{"id": "a", "text": "x", "source": "wiki", "updated_at": "2024-05-01T12:00:00+02:00", "metadata": {}}'
    result = parse_document(raw, 1024)
    assert isinstance(result, Document)
    assert result.updated_at_us == parse_timestamp("2024-05-01T10:00:00Z")
    assert result.source == "wiki" and result.raw == raw
