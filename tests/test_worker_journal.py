"""The worker's redo journal: what it leaves out, and the checks that stand in for it (worker/journal.py).

The crash protocol itself runs against a real broker in tests/integration/test_worker_changelog_order.py.
"""

from __future__ import annotations

from collections.abc import Callable

from stream_dedupe.worker import journal
from stream_dedupe.worker.journal import CONTENT_CHECKS, decode_batch, encode_batch

BATCH: dict[str, dict[bytes, bytes | None]] = {
    "docs": {b"new": b"record-new", b"old": b"record-old-v2", b"covered": b"record-covered-v2"},
    "documents": {b"new": b'{"id":"new"}', b"old": b'{"id":"old","v":2}'},
    "sigs": {b"new": b"\x01" * 8, b"old": b"\x02" * 8, b"gone": None},
    "sets": {b"new": b"\x03" * 8},
    "meta": {b"position": b"7"},
}


def test_added_documents_are_those_with_a_record_and_an_original() -> None:
    # "covered" only has its record rewritten (a cover change): no content of its own in the batch
    assert sorted(journal.added_documents(BATCH)) == [b"new", b"old"]


def test_only_the_content_of_new_documents_leaves_the_journal() -> None:
    content, rest = journal.split_new_content(BATCH, [b"new"])  # "old" had a record before the batch
    assert content == {
        "documents": {b"new": b'{"id":"new"}'},
        "sigs": {b"new": b"\x01" * 8},
        "sets": {b"new": b"\x03" * 8},
    }
    assert rest == {
        "docs": BATCH["docs"],
        "documents": {b"old": b'{"id":"old","v":2}'},
        "sigs": {b"old": b"\x02" * 8, b"gone": None},
        "meta": {b"position": b"7"},
    }
    merged = decode_batch(encode_batch(rest) + encode_batch(content))
    assert merged == {ns: ops for ns, ops in BATCH.items()}  # together they are the whole batch


def test_no_new_documents_leaves_the_batch_whole() -> None:
    content, rest = journal.split_new_content(BATCH, [])
    assert content == {} and rest == BATCH


def test_content_checks_match_the_tables_only_when_every_value_arrived_unchanged() -> None:
    content = {
        "documents": {b"a": b"original a", b"b": b"original b"},
        "sigs": {b"a": b"sig a"},  # b has no signature (too short to shingle): not checked
        "sets": {b"a": b"set a"},
    }
    checks = journal.content_checks(content)[CONTENT_CHECKS]
    assert set(checks) == {b"a", b"b"}
    journaled = decode_batch(encode_batch({CONTENT_CHECKS: checks}))[CONTENT_CHECKS]

    def reader(tables: dict[str, dict[bytes, bytes]]) -> Callable[[str, list[bytes]], list[bytes | None]]:
        return lambda ns, keys: [tables.get(ns, {}).get(k) for k in keys]

    tables = {ns: dict(ops) for ns, ops in content.items()}
    assert journal.content_matches(journaled, reader(tables))
    missing = {ns: dict(ops) for ns, ops in content.items()}
    del missing["sets"][b"a"]
    assert not journal.content_matches(journaled, reader(missing))
    changed = {ns: dict(ops) for ns, ops in content.items()}
    changed["documents"][b"b"] = b"original B"
    assert not journal.content_matches(journaled, reader(changed))
