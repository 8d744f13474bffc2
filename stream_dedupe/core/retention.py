"""Retention: documents of a ``source`` are forgotten once older than that source's maximum age.

News pages may be kept for days while runbooks are kept forever: a policy maps sources to a
maximum age. Expired documents are removed exactly like deletions (their clusters re-elect a
canonical or split), so the lifecycle invariants hold. Age is measured from ``updated_at``;
documents without one, and sources without a policy, never expire.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from stream_dedupe.errors import ConfigError
from stream_dedupe.storage.base import KVStore
from stream_dedupe.storage.state import DocRecord

_UNITS_US = {"s": 1_000_000, "m": 60_000_000, "h": 3_600_000_000, "d": 86_400_000_000}


def parse_age(text: str) -> int:
    """``90s``, ``30m``, ``12h`` or ``7d`` in microseconds.

    Raises:
        ConfigError: on anything else, and on an age of zero (it would expire a source's documents
            as they arrive).

    """
    match = re.fullmatch(r"\s*(\d+)\s*([smhd])\s*", text)
    if not match:
        raise ConfigError(f"cannot parse age {text!r}: use a number and a unit s, m, h or d (e.g. 7d)")
    if int(match.group(1)) == 0:
        raise ConfigError(
            f"age {text.strip()!r} would expire every document of its source as it arrives: give a positive "
            "age, or leave the source out of the policy to keep its documents"
        )
    return int(match.group(1)) * _UNITS_US[match.group(2)]


@dataclass(frozen=True)
class RetentionPolicy:
    """Maximum age per source, in microseconds.

    Attributes:
        max_age_us: ``{source: maximum age}``; the empty string stands for documents without a source.

    """

    max_age_us: dict[str, int]

    @classmethod
    def parse(cls, rules: list[str]) -> RetentionPolicy:
        """Parse ``SOURCE=AGE`` rules (``news=7d``; ``=30d`` for documents without a source).

        Raises:
            ConfigError: on a malformed rule or a source given twice.

        """
        ages: dict[str, int] = {}
        for rule in rules:
            source, sep, age = rule.partition("=")
            source = source.strip()  # "news = 7d" means news: no crawler names a source with spaces around it
            if not sep:
                raise ConfigError(f"cannot parse retention rule {rule!r}: use SOURCE=AGE, e.g. news=7d")
            if source in ages:
                raise ConfigError(f"source {source!r} has two retention rules; keep one")
            ages[source] = parse_age(age)
        return cls(ages)

    def cutoff_us(self, source: str | None, now_us: int) -> int | None:
        """Documents of ``source`` last updated before this time (us) are expired at ``now_us``; None: never."""
        limit = self.max_age_us.get(source or "")
        return None if limit is None else now_us - limit


def later(reported_us: int | None, known_us: int | None) -> bool:
    """True if a re-crawl's ``updated_at`` moves a document's age forward (it has one, and it is newer)."""
    return reported_us is not None and (known_us is None or reported_us > known_us)


def expired_at(record: DocRecord, cutoff_us: int) -> bool:
    """True if a document last known current before ``cutoff_us`` (:attr:`DocRecord.age_from_us`); undated: never."""
    age_from = record.age_from_us
    return age_from is not None and age_from < cutoff_us


def still_expired(record: DocRecord | None, cutoff_us: int) -> bool:
    """True if a document's record (None: not in the state) is still older than ``cutoff_us``.

    The worker expires a document by a record it sends ahead of time with the cutoff its sweep
    used; at its turn the document may have been re-crawled (newer: kept) or deleted (nothing to do).
    """
    return record is not None and expired_at(record, cutoff_us)


def expired_entries(
    docs: Iterable[tuple[bytes, bytes]], policy: RetentionPolicy, now_us: int, seen: set[str] | None = None
) -> Iterator[tuple[bytes, int]]:
    """``(key, cutoff)`` of the ``docs`` records (key, encoded record) that the policy expires at ``now_us``.

    The one test of ``expire`` (:func:`expired_ids`) and the worker's sweep
    (:mod:`stream_dedupe.worker.retention`, which sends the cutoff with each expiry). ``seen``:
    filled with the policy's sources that some document has (a rule whose source none has
    expires nothing: a typo, or a case that differs).
    """
    for key, raw in docs:
        record = DocRecord.decode(raw)
        cutoff = policy.cutoff_us(record.source, now_us)
        if cutoff is None:
            continue
        if seen is not None:
            seen.add(record.source or "")
        if expired_at(record, cutoff):
            yield key, cutoff


def expired_ids(store: KVStore, policy: RetentionPolicy, now_us: int, seen: set[str] | None = None) -> Iterator[str]:
    """Ids of the documents of ``store`` that the policy expires at ``now_us``, in id order (see expired_entries)."""
    for key, _ in expired_entries(store.items("docs"), policy, now_us, seen):
        yield key.decode("utf-8")
