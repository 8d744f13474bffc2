"""Retention in the worker: documents older than their source's maximum age leave like deletions.

The embedded command has ``stream-dedupe expire``; a worker's state grows with every page ever
crawled (and the decider's LSH index with it, ~0.5-1 KB of memory a document), so the worker
needs the same policy applied while it runs (``--max-age news=7d,=30d``).

How: every ``expire_interval`` the worker that decides scans its committed ``docs`` table (lazily,
yielding to the event loop) and sends one *expiry record* per expired document to the index
topic, the single ordered log the decide stage reads: key = the id, no value, header
``sd-expire`` = the cutoff the sweep used (microseconds). The decide stage takes a run of expiry
records as a batch of its own (:func:`first_run`) and deletes each document that the committed
state still holds as last known current before that cutoff (:meth:`DedupeEngine.still_expired`):
a page re-crawled since the sweep is kept, one deleted since is not deleted twice. So retention
goes through the one decision path: the same ``deleted``, ``canonical-changed`` and
``cluster-split`` events as a crawler's deletion, tombstones on the deduped topic, the state
changelogged, positions committed, exactly-once publishing in ``exactly_once`` mode; a sweep
that dies half-way is simply run again. The events of an expiry name the index record as their
origin (``sd-origin``: the index topic, partition 0, its offset).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from itertools import islice
from typing import Any

from stream_dedupe.core.records import Deletion
from stream_dedupe.core.retention import RetentionPolicy, expired_entries
from stream_dedupe.worker.produce import send_batches
from stream_dedupe.worker.shard_stage import call_engine

log = logging.getLogger("stream_dedupe.worker")

#: Header of an expiry record: the cutoff (us since the epoch) its sweep used.
EXPIRE_HEADER = "sd-expire"
#: Documents decoded between two yields to the event loop during a sweep.
_SCAN_SLICE = 512
#: Most expiry records one sweep sends (a policy switched on over a large old state expires a
#: backlog in steps: the next sweep follows as soon as these are decided, not an interval later).
MAX_PER_SWEEP = 50_000
#: Seconds between two looks at whether a sweep is due.
CHECK_EVERY_S = 5.0


def is_expiry(message: Any) -> bool:
    """True for an expiry record of the index topic (no value: a forwarded document has one)."""
    return message.value is None and any(key == EXPIRE_HEADER for key, _ in message.headers or ())


def first_run(messages: Sequence[Any]) -> list[Any]:
    """The leading messages that are all expiry records, or all not: what one batch may decide.

    An expiry is checked against the committed state, so it never shares a batch with records
    that could change the same document before its turn.
    """
    if not messages:
        return []
    kind = is_expiry(messages[0])
    end = 1
    while end < len(messages) and is_expiry(messages[end]) == kind:
        end += 1
    return list(messages[:end])


async def expiry_deletions(rt: Any, kept: Sequence[tuple[Any, Any]]) -> list[tuple[Deletion, Any]]:
    """``(Deletion, origin)`` for the expiry records of ``kept`` whose document is still expired.

    Args:
        rt: The worker's runtime (its engine has committed every earlier batch).
        kept: ``(index message, origin)`` of a run of expiry records not decided yet.

    """
    pairs = [(m.key.decode("utf-8"), int(dict(m.headers)[EXPIRE_HEADER])) for m, _ in kept]
    flags = await call_engine(rt, rt.engine.still_expired, pairs)
    out: list[tuple[Deletion, Any]] = []
    seen: set[str] = set()
    for (doc_id, _), flag, (_, origin) in zip(pairs, flags, kept, strict=True):
        if flag and doc_id not in seen:  # two sweeps may name a document twice
            seen.add(doc_id)
            out.append((Deletion(doc_id), origin))
    return out


class RetentionSweeper:
    """Finds expired documents on the deciding worker and sends their expiry records.

    Args:
        policy: The maximum age per source.
        interval: Seconds between two sweeps.
        limit: Most expiry records a sweep sends.

    """

    def __init__(self, policy: RetentionPolicy, interval: float, limit: int = MAX_PER_SWEEP) -> None:
        self.policy = policy
        self.interval = interval
        self.limit = limit
        #: Index offset of the last expiry record sent (-1: none); no new sweep until it is decided.
        self.sent_until = -1
        #: Monotonic time of the next sweep (the first: one interval after start).
        self.due = time.monotonic() + interval
        #: The last sweep stopped at ``limit``: the next one is due once its records are decided.
        self.more = False
        self._running = False
        self._warned = False
        rules = ", ".join(
            f"{source or '(no source)'}: {age_us / 86_400_000_000:g} days"
            for source, age_us in policy.max_age_us.items()
        )
        log.info("retention: %s; a sweep every %.0fs", rules, interval)

    async def tick(self, rt: Any) -> int:
        """Sweep if one is due, this worker decides and the last sweep's records are decided; returns records sent.

        Called every :data:`CHECK_EVERY_S` seconds. A failure (the broker, a rebalance mid-sweep) is
        logged and the sweep runs again at the next interval: nothing was deleted without its record.
        """
        if self._running or (time.monotonic() < self.due and not self.more):
            return 0
        if rt.engine is None or not rt.gate.is_set() or rt.producer is None or self.sent_until > rt.index_offset:
            return 0  # not the decider, or the last sweep's expiry records are still on their way
        self._running = True
        try:
            return await self._sweep(rt)
        except Exception as exc:
            log.warning("retention sweep failed: %r; it runs again in %.0fs", exc, self.interval)
            self.more = False
            return 0
        finally:
            self.due = time.monotonic() + self.interval
            self._running = False

    async def _sweep(self, rt: Any) -> int:
        started, now_us = time.monotonic(), int(time.time() * 1_000_000)
        expired: list[tuple[bytes, int]] = []
        seen: set[str] = set()
        scanned = 0
        docs = iter(rt.store.scan("docs"))
        while len(expired) < self.limit and (chunk := list(islice(docs, _SCAN_SLICE))):
            scanned += len(chunk)
            expired += expired_entries(chunk, self.policy, now_us, seen)
            await asyncio.sleep(0)  # a sweep of millions of records must not stall the stream
        expired = expired[: self.limit]
        self.more = len(expired) >= self.limit
        if scanned and not self.more and not self._warned:  # a whole scan: say which rules match nothing
            self._warned = True
            for source in sorted(set(self.policy.max_age_us) - seen):
                log.warning(
                    "retention: no document of the state has source %r, so its rule expires nothing "
                    "(sources are case-sensitive; `stream-dedupe stats --state DIR --by-source` lists them)",
                    source,
                )
        if rt.engine is None or not rt.gate.is_set():
            return 0  # the index partition moved during the scan: the new decider sweeps
        if not expired:
            log.info("retention sweep: nothing expired (%.1fs)", time.monotonic() - started)
            return 0
        topic = rt.settings.index_topic
        records = [(key, None) for key, _ in expired]
        headers = [[(EXPIRE_HEADER, b"%d" % cutoff)] for _, cutoff in expired]
        last = -1
        for future, count in await send_batches(rt.producer, topic, 0, records, headers, max_bytes=1 << 20):
            meta = await future
            last = max(last, int(meta.offset) + count - 1)
        self.sent_until = last
        log.info(
            "retention sweep: %d documents older than their source's maximum age sent for expiry (%.1fs)%s",
            len(expired),
            time.monotonic() - started,
            "; more follow once these are decided" if self.more else "",
        )
        return len(expired)
