"""The canonical-document policy: longest normalized text, then most recent, then smallest id."""

from __future__ import annotations

from functools import reduce

from stream_dedupe.model import CanonicalKey

__all__ = ["CanonicalKey", "better", "choose"]


def _rank(key: CanonicalKey) -> tuple[int, int, int]:
    known = 0 if key.updated_at_us is None else 1
    return (key.length, known, key.updated_at_us or 0)


def better(a: CanonicalKey, b: CanonicalKey) -> CanonicalKey:
    """Return the preferred canonical of two documents.

    Longest normalized text wins, then the most recent ``updated_at`` (unknown is oldest), then
    the smallest id. The result depends only on the two keys, never on which came first.
    """
    rank_a, rank_b = _rank(a), _rank(b)
    if rank_a != rank_b:
        return a if rank_a > rank_b else b
    return a if a.doc_id <= b.doc_id else b


def choose(keys: list[CanonicalKey]) -> CanonicalKey:
    """Return the preferred canonical among ``keys`` (which must not be empty)."""
    return reduce(better, keys)
