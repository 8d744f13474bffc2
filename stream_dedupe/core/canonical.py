"""The canonical-document policy: longest normalized text, then most recent, then smallest id."""

from __future__ import annotations

from dataclasses import dataclass
from functools import reduce


@dataclass(frozen=True)
class CanonicalKey:
    """What the canonical choice looks at for one document.

    Attributes:
        doc_id: The document id.
        length: Length of the normalized text, in characters.
        updated_at_us: ``updated_at`` in microseconds since the epoch, or None when unknown
            (unknown ranks as oldest).

    """

    doc_id: str
    length: int
    updated_at_us: int | None

    def _rank(self) -> tuple[int, int, int]:
        known = 0 if self.updated_at_us is None else 1
        return (self.length, known, self.updated_at_us or 0)


def better(a: CanonicalKey, b: CanonicalKey) -> CanonicalKey:
    """Return the preferred canonical of two documents.

    Longest normalized text wins, then the most recent ``updated_at`` (unknown is oldest), then
    the smallest id. The result depends only on the two keys, never on which came first.
    """
    rank_a, rank_b = a._rank(), b._rank()
    if rank_a != rank_b:
        return a if rank_a > rank_b else b
    return a if a.doc_id <= b.doc_id else b


def choose(keys: list[CanonicalKey]) -> CanonicalKey:
    """Return the preferred canonical among ``keys`` (which must not be empty)."""
    return reduce(better, keys)
