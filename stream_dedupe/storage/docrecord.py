"""The record the state keeps for each document (``docs`` namespace) and its versioned encoding.

Re-exported by :mod:`stream_dedupe.storage.state`, where it is usually imported from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson


def dumps(value: Any) -> bytes:
    """``orjson.dumps`` copied to its length.

    orjson 3.13 returns bytes objects that keep their whole output buffer: 4 KB for a short list,
    8 KB for a 1,000-character string, 65 KB for 5,000 (measured with ``tracemalloc``). A batch
    stages thousands of such values (and the in-memory store keeps them): the copy costs ~0.11 us.
    """
    return memoryview(orjson.dumps(value)).tobytes()


#: The ``epoch`` of a record whose text was counted by boilerplate learning when first decided:
#: every line of it that is learned later names the document among its carriers, which are
#: signed again then, so the record stays current whatever is learned (:mod:`~stream_dedupe.core.recrawl`).
#: A release before this one compares it with an epoch (never negative) and reads the text once.
COUNTED = -1
#: The ``epoch`` of a record no re-crawl may be recognized by: its text must be read once.
STALE = -2


@dataclass(frozen=True)
class DocRecord:
    """What the state keeps about each document.

    Attributes:
        content_hash: 128-bit hash of the normalized text.
        length: Normalized length in characters (canonical policy).
        updated_at_us: ``updated_at`` in microseconds, or None.
        tokens: Number of tokens of the normalized text.
        indexed: True when the document's bands are in the LSH index (it represents its content).
        source: The document's ``source``, or None (retention policies are per source).
        covered_by: The representative that holds this document's place in the index (a verified
            near-duplicate of it), or None when the document is itself a representative.
        covered_similarity: Verified similarity to ``covered_by`` (None for a representative).
        title_key: 8 bytes (hex) identifying the normalized title, or None (no title, or the
            title guard is off): documents with different titles are never near-duplicates.
        fingerprint: 8 bytes identifying the text, title and source this record's
            ``content_hash`` was derived from (:func:`~stream_dedupe.core.recrawl.text_fingerprint`),
            or None (a record written before version 4).
        epoch: How many boilerplate lines of its source were learned when that text was stripped: with the
            fingerprint, what lets an unchanged re-crawl be recognized without reading its text
            again (:mod:`~stream_dedupe.core.recrawl`); :data:`COUNTED` for a text counted when
            first decided, :data:`STALE` for one that must be read again.
        seen_at_us: The latest ``updated_at`` an unchanged re-crawl reported, when later than
            ``updated_at_us`` (None: none did). The record keeps the content's ``updated_at``
            (the canonical order reads it); retention measures a document's age from the later
            of the two (:attr:`age_from_us`).

    """

    content_hash: bytes
    length: int
    updated_at_us: int | None
    tokens: int
    indexed: bool
    source: str | None = None
    covered_by: str | None = None
    covered_similarity: float | None = None
    title_key: str | None = None
    fingerprint: bytes | None = None
    epoch: int = 0
    seen_at_us: int | None = None

    @property
    def age_from_us(self) -> int | None:
        """When the document was last known current: ``updated_at``, or a later unchanged re-crawl's."""
        if self.seen_at_us is None:
            return self.updated_at_us
        return self.seen_at_us if self.updated_at_us is None else max(self.updated_at_us, self.seen_at_us)

    @property
    def representative(self) -> bool:
        """True if the document is in the indexed (deduped) set."""
        return self.covered_by is None

    def with_cover(self, covered_by: str | None, covered_similarity: float | None) -> DocRecord:
        """A copy with another cover assignment: ``dataclasses.replace`` of the two fields, at half its cost."""
        return DocRecord(
            self.content_hash,
            self.length,
            self.updated_at_us,
            self.tokens,
            self.indexed,
            self.source,
            covered_by,
            covered_similarity,
            self.title_key,
            self.fingerprint,
            self.epoch,
            self.seen_at_us,
        )

    def encode(self) -> bytes:
        """Versioned JSON encoding.

        Version 2 added ``source``, version 3 ``title_key`` and the cover fields (present only
        when covered), version 4 the fingerprint and epoch after the cover fields, which it
        always writes (null for a representative): an older release reads a version 4 record
        as the version 3 record it contains. A record without a fingerprint is version 3. Version
        5 appends ``seen_at_us`` to version 4 (only a record with a fingerprint carries it): an
        older release reads it as the version 4 record it contains.
        """
        seen = self.seen_at_us is not None and self.fingerprint is not None
        version = 5 if seen else 3 if self.fingerprint is None else 4
        fields: list[Any] = [version, self.content_hash.hex(), self.length, self.updated_at_us, self.tokens]
        fields += [self.indexed, self.source, self.title_key]
        if self.fingerprint is not None:
            fields += [self.covered_by, self.covered_similarity, self.fingerprint.hex(), self.epoch]
            if seen:
                fields.append(self.seen_at_us)
        elif self.covered_by is not None:
            fields += [self.covered_by, self.covered_similarity]
        return dumps(fields)

    @staticmethod
    def encode_representative(
        content_hash: bytes,
        length: int,
        updated_at_us: int | None,
        tokens: int,
        indexed: bool,
        source: str | None,
        title_key: str | None,
        fingerprint: bytes | None = None,
        epoch: int = 0,
    ) -> bytes:
        """:meth:`encode` of a representative's record, without building the record first."""
        if fingerprint is None:
            return dumps([3, content_hash.hex(), length, updated_at_us, tokens, indexed, source, title_key])
        fields = [4, content_hash.hex(), length, updated_at_us, tokens, indexed, source, title_key, None, None]
        return dumps([*fields, fingerprint.hex(), epoch])

    @staticmethod
    def covered_by_of(raw: bytes) -> str | None:
        """``decode(raw).covered_by`` (None: a representative), without building the record (scans)."""
        return _cover(orjson.loads(raw))[0]

    @staticmethod
    def indexed_of(raw: bytes) -> bool:
        """``decode(raw).indexed``, without building the record (a rebuild of the band tables)."""
        return bool(orjson.loads(raw)[5])

    @classmethod
    def decode(cls, raw: bytes) -> DocRecord:
        """Inverse of :meth:`encode` (reads the records of versions 1 to 3 too)."""
        fields = orjson.loads(raw)
        version = fields[0]
        source = fields[6] if version >= 2 else None
        title_key = fields[7] if version >= 3 else None
        fingerprint, epoch = (bytes.fromhex(fields[10]), fields[11]) if version >= 4 else (None, 0)
        covered_by, similarity = _cover(fields)
        return cls(
            content_hash=bytes.fromhex(fields[1]),
            length=fields[2],
            updated_at_us=fields[3],
            tokens=fields[4],
            indexed=fields[5],
            source=source,
            covered_by=covered_by,
            covered_similarity=similarity,
            title_key=title_key,
            fingerprint=fingerprint,
            epoch=epoch,
            seen_at_us=fields[12] if version >= 5 else None,
        )


def _cover(fields: list[Any]) -> tuple[str | None, float | None]:
    """``(covered_by, covered_similarity)`` of decoded record fields (version 3 adds them when covered, 4 always)."""
    return (fields[8], fields[9]) if len(fields) > 9 else (None, None)
