"""Size-aware output (issue 13): dead letters that always fit, the document limit the topics allow."""

from __future__ import annotations

import base64
import hashlib
import os
import random

import orjson
import pytest

from stream_dedupe.worker.errors import WorkerConfigError
from stream_dedupe.worker.poison import ChangelogError, is_record_error, is_transient
from stream_dedupe.worker.settings import WorkerSettings
from stream_dedupe.worker.sizes import TopicLimits, changelog_topics, compressed_size, dead_letter, record_bytes


def test_a_dead_letter_always_fits_the_dlq_topic() -> None:
    s = WorkerSettings()
    limits = TopicLimits({s.dlq_topic: 20_000})
    payload = os.urandom(900_000)
    origin = {"topic": "crawl.documents", "partition": 2, "offset": 41}
    letter = dead_letter(s, limits, "not-json", "record is not JSON", origin, b"k" * 5000, payload)
    assert record_bytes(b"k" * 513, letter, [("sd-origin", b"crawl.documents/2/41")]) <= 20_000
    record = orjson.loads(letter)
    assert record["version"] == 2 and record["truncated"] is True and record["size"] == 900_000
    assert record["sha256"] == hashlib.sha256(payload).hexdigest() and len(record["key"]) == 513
    assert payload.startswith(base64.b64decode(record["value_b64"])) and record["offset"] == 41
    small = orjson.loads(dead_letter(s, TopicLimits(), "bad-id", "x", origin, None, b'{"id": 5}'))
    assert small["truncated"] is False and base64.b64decode(small["value_b64"]) == b'{"id": 5}'
    assert small["key"] is None  # no key; an empty key is one, and stays "" (it was null)
    assert orjson.loads(dead_letter(s, TopicLimits(), "bad-id", "x", origin, b"", b"{}"))["key"] == ""
    capped = orjson.loads(dead_letter(s, TopicLimits(), "not-json", "x", origin, None, payload))
    assert len(base64.b64decode(capped["value_b64"])) == s.dlq_max_payload_bytes  # 64 KiB by default


def test_the_document_limit_is_the_lowest_the_topics_allow() -> None:
    s = WorkerSettings(app_id="a")
    assert TopicLimits(default=8 << 20).doc_limit(s) == (s.max_doc_bytes, "max_doc_bytes")
    documents = changelog_topics(s)["documents"]
    limit, bound = TopicLimits({documents: 300_000}, default=8 << 20).doc_limit(s)
    assert limit < 300_000 - 512 and bound == f"max.message.bytes of topic {documents}"
    limit, bound = TopicLimits({s.index_topic: 200_000}).doc_limit(s)
    assert limit < 200_000 and s.index_topic in bound
    assert documents == "a-state-documents-changelog"


def test_compressed_size_follows_the_codec() -> None:
    text = b"the same words again and again " * 10_000
    assert compressed_size(text, None) == len(text)
    for codec in ("zstd", "lz4", "gzip"):
        assert compressed_size(text, codec) < len(text) // 20


def test_new_settings_are_checked() -> None:
    assert WorkerSettings().producer_compression == "zstd"
    assert WorkerSettings(compression_type="none").producer_compression is None
    for bad in ({"compression_type": "brotli"}, {"poison_retries": 0}, {"max_id_bytes": 0}):
        with pytest.raises(WorkerConfigError):
            WorkerSettings(**bad)  # type: ignore[arg-type]
    loaded = WorkerSettings.load({"STREAM_DEDUPE_MAX_METADATA_FIELDS": "7", "STREAM_DEDUPE_POISON_RETRIES": "5"})
    assert loaded.parse_limits().max_metadata_fields == 7 and loaded.poison_retries == 5


def test_which_errors_are_blamed_on_a_record() -> None:
    from aiokafka import errors

    assert is_record_error(errors.MessageSizeTooLargeError()) and not is_transient(errors.MessageSizeTooLargeError())
    assert is_transient(errors.KafkaConnectionError()) and not is_record_error(errors.KafkaConnectionError())
    assert is_transient(errors.KafkaTimeoutError()) and is_transient(ConnectionResetError())
    assert is_record_error(ValueError("engine")) and not is_record_error(ChangelogError("changelog"))
    assert not is_record_error(errors.ProducerFenced()) and not is_transient(errors.ProducerFenced())


def test_record_bytes_bounds_aiokafkas_estimate_closely() -> None:
    from aiokafka.record.default_records import DefaultRecordBatchBuilder

    rng = random.Random(3)
    for _ in range(500):
        key = None if rng.random() < 0.1 else rng.randbytes(rng.choice([0, 1, 127, 128, 20_000]))
        value = None if rng.random() < 0.1 else rng.randbytes(rng.choice([0, 5, 16_383, 16_384, 3_000_000]))
        headers = [
            (rng.choice(["sd-origin", "sd-signed", "é"]), rng.randbytes(rng.choice([0, 200, 2_000_000])))
            for _ in range(rng.randrange(4))
        ]
        exact = DefaultRecordBatchBuilder.estimate_size_in_bytes(key, value, headers)
        assert exact <= record_bytes(key, value, headers) <= exact + 15 + 10 * len(headers)


def test_a_batch_of_changelog_records_fits_exactly_when_each_record_does() -> None:
    """The store's one-pass check answers as record_bytes does record by record (the slow path decides the rest)."""
    from stream_dedupe.worker.store import _all_fit

    records = [(b"k%d" % i, b"v" * i) for i in range(50)] + [(b"deleted", None)]
    largest = max(record_bytes(k, v) for k, v in records)
    assert _all_fit(records, largest) and _all_fit([], 0)
    assert not _all_fit(records, largest - 1)
    assert all(record_bytes(k, v) <= largest for k, v in records)
    assert not _all_fit([(b"key-" * 40, b"")], record_bytes(b"key-" * 40, b"") - 1)  # the key counts too
