"""The worker's redo journal of a state batch, and the part of a batch that needs no journal.

A batch is journaled twice (:mod:`stream_dedupe.worker.store`): whole, in a local file, against a
kill between the tables' local writes; and in the ``meta`` changelog, against a crash between
the tables' changelog writes followed by a restore from the changelogs (a lost disk, a takeover).

The changelog journal leaves out the *content* of the documents a batch adds to the state: the
original JSON, signature and shingle set of a document id the state has no record of
(:func:`split_new_content`), about 90% of a batch's bytes (BENCHMARKS.md, "A smaller redo
journal"), so that the changelogs no longer carry each new document twice. The content is sent
to its changelogs beside the journal, and the journal holds a CRC-32 of each document's content
instead (:func:`content_checks`): a restore that finds the journal complete re-applies it only
if the restored tables hold that content (:func:`content_matches`), and otherwise drops it, as
if the batch had never been written. Content without its batch is harmless: those values depend
only on the document, nothing reads them for an id without a document record (the band tables
are rebuilt from the signatures of recorded documents only), and the batch, decided again from
the index topic, puts the same values.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Mapping, Sequence

from stream_dedupe.storage.base import WriteSet

_HEAD = struct.Struct("<BIi")  # namespace name length, key length, value length (-1: delete)
#: ``meta`` keys of the redo journal in the changelog: ``<prefix>head`` = b"<chunks>:<sha256>",
#: ``<prefix><i>`` = the i-th chunk of :func:`encode_batch` of the batch.
JOURNAL_PREFIX = b"worker:journal:"
JOURNAL_HEAD = JOURNAL_PREFIX + b"head"
#: Namespaces whose value for a document id is a function of that document's version alone.
CONTENT_NAMESPACES = ("documents", "sigs", "sets")
#: The namespace whose key says that the state knows a document.
RECORDS_NAMESPACE = "docs"
#: A pseudo-namespace of the changelog journal: document id -> which content namespaces it puts
#: (a bit mask over :data:`CONTENT_NAMESPACES`) and a CRC-32 of their values. Never applied.
CONTENT_CHECKS = "~content"


def encode_batch(batch: WriteSet) -> bytes:
    """Serialize a write batch for the redo journal."""
    parts: list[bytes] = []
    for namespace, ops in batch.items():
        name = namespace.encode()
        for key, value in ops.items():
            parts.append(_HEAD.pack(len(name), len(key), -1 if value is None else len(value)))
            parts.append(name)
            parts.append(key)
            if value is not None:
                parts.append(value)
    return b"".join(parts)


def decode_batch(blob: bytes) -> dict[str, dict[bytes, bytes | None]]:
    """Inverse of :func:`encode_batch` (concatenated batches decode as one, later writes winning)."""
    out: dict[str, dict[bytes, bytes | None]] = {}
    pos, size = 0, len(blob)
    while pos < size:
        nlen, klen, vlen = _HEAD.unpack_from(blob, pos)
        pos += _HEAD.size
        namespace = blob[pos : pos + nlen].decode()
        pos += nlen
        key = blob[pos : pos + klen]
        pos += klen
        value = None
        if vlen >= 0:
            value = blob[pos : pos + vlen]
            pos += vlen
        out.setdefault(namespace, {})[key] = value
    return out


def added_documents(batch: WriteSet) -> list[bytes]:
    """The ids a batch writes a document record and an original for: candidates for :func:`split_new_content`."""
    records = batch.get(RECORDS_NAMESPACE, {})
    originals = batch.get("documents", {})
    return [key for key, value in originals.items() if value is not None and records.get(key) is not None]


def split_new_content(
    batch: WriteSet, new_ids: Sequence[bytes]
) -> tuple[dict[str, dict[bytes, bytes]], dict[str, dict[bytes, bytes | None]]]:
    """Split ``batch`` into the content puts of ``new_ids`` and everything else.

    Args:
        batch: A state batch.
        new_ids: Ids of :func:`added_documents` that had no document record before the batch.

    Returns:
        ``(content, rest)``: the puts of :data:`CONTENT_NAMESPACES` under ``new_ids`` (sent to
        their changelogs beside the journal, checked by it, never journaled), and the rest of
        the batch (journaled).

    """
    new = set(new_ids)
    content: dict[str, dict[bytes, bytes]] = {}
    rest: dict[str, dict[bytes, bytes | None]] = {}
    for namespace, ops in batch.items():
        if namespace not in CONTENT_NAMESPACES or not new:
            rest[namespace] = dict(ops)
            continue
        early = {key: value for key, value in ops.items() if value is not None and key in new}
        if early:
            content[namespace] = early
        others = {key: value for key, value in ops.items() if key not in early}
        if others:
            rest[namespace] = others
    return content, rest


def content_checks(content: Mapping[str, Mapping[bytes, bytes]]) -> dict[str, dict[bytes, bytes]]:
    """One check per document of ``content`` (see :data:`CONTENT_CHECKS`), to journal beside the rest."""
    tables = [content.get(namespace, {}) for namespace in CONTENT_NAMESPACES]
    crc32 = zlib.crc32
    checks: dict[bytes, bytes] = {}
    for key in set().union(*tables):
        mask = crc = 0
        for bit, table in enumerate(tables):
            value = table.get(key)
            if value is not None:
                mask |= 1 << bit
                crc = crc32(value, crc)
        checks[key] = bytes((mask,)) + crc.to_bytes(4, "little")
    return {CONTENT_CHECKS: checks}


def content_matches(
    checks: Mapping[bytes, bytes | None], read: Callable[[str, list[bytes]], list[bytes | None]]
) -> bool:
    """True when the tables hold the content a journal's :data:`CONTENT_CHECKS` describe.

    Args:
        checks: The journal's checks (document id -> mask and CRC-32).
        read: Multi-get of a namespace (``FaustTableStore.get_many``).

    """
    keys = list(checks)
    crcs = dict.fromkeys(keys, 0)
    for bit, namespace in enumerate(CONTENT_NAMESPACES):
        wanted = [key for key in keys if (checks[key] or b"\0")[0] & (1 << bit)]
        for key, value in zip(wanted, read(namespace, wanted) if wanted else [], strict=True):
            if value is None:
                return False
            crcs[key] = zlib.crc32(value, crcs[key])
    return all(crcs[key].to_bytes(4, "little") == (checks[key] or b"")[1:] for key in keys)
