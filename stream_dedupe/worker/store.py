"""A :class:`~stream_dedupe.storage.base.KVStore` over Faust tables (RocksDB, changelogged to Kafka).

One Faust table per namespace of :data:`~stream_dedupe.storage.base.NAMESPACES`, each with one
partition, raw byte keys and values. Faust writes each table key to the local RocksDB store and
sends it to the table's compacted changelog topic, from which a lost local state is rebuilt.

Writes bypass Faust's per-key changelog path (one awaited send per key through Faust's producer
buffer was ~90% of the worker's time): :meth:`FaustTableStore.write` puts the keys into the
tables' local RocksDB stores (one ``WriteBatch`` per table, straight to the ``Rdict``; reads are
multi-gets on it: Faust's per-key wrappers cost ~20 us a key), and :meth:`FaustTableStore.settle`
sends the same keys and values to the tables' changelog topics with the app's producer in one
burst, awaits every acknowledgement and records the changelog offsets in the stores (as Faust
does), so recovery works unchanged.

Atomicity. Local writes are applied one table at a time, so a ``kill -9`` in the middle of
:meth:`FaustTableStore.write` would leave half an engine batch behind. Every batch is therefore
first written to a local redo journal (one file, replaced atomically), then applied;
:meth:`FaustTableStore.settle` removes the journal only once the changelog records are
acknowledged. On start-up :meth:`FaustTableStore.recover` re-applies (and re-sends) a journal
left behind - puts and deletes of final values are idempotent - so the tables hold whole
batches, locally and in the changelogs.

The changelogs are one topic per table, so a crash while they are written could leave some
tables with the batch and others without; a worker that then rebuilds its state from the
changelogs (a lost disk, or a takeover) would restore half a batch. A redo journal is therefore
written to the ``meta`` changelog before the tables (:data:`JOURNAL_PREFIX` keys: chunks, then a
head naming them). The sequence is: (1) the journal, beside the content (original, signature,
shingle set) of the documents the batch adds to the state, which the journal leaves out and
checks instead (:mod:`~stream_dedupe.worker.journal`); (2) the other tables; (3) ``meta``'s own
records (the decided offsets, last), then the journal's tombstones. Whatever prefix of that
sequence reached Kafka, a restore finds either no journal (nothing of the batch was recorded, or
all of it; at most content of documents the state has no record of, which nothing reads and
the batch, decided again, writes again) or a complete one, which :meth:`FaustTableStore.recover`
re-applies when the content it checks arrived too, and drops otherwise (tested with a fault at
every step followed by disk loss: ``tests/integration/test_worker_changelog_order.py``).
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from stream_dedupe.storage.base import NAMESPACES, WriteSet
from stream_dedupe.storage.rocks import in_key_order
from stream_dedupe.worker import faust_compat
from stream_dedupe.worker.faults import fault_armed, fault_point
from stream_dedupe.worker.journal import (
    CONTENT_CHECKS,
    JOURNAL_HEAD,
    JOURNAL_PREFIX,
    RECORDS_NAMESPACE,
    added_documents,
    content_checks,
    content_matches,
    decode_batch,
    encode_batch,
    split_new_content,
)
from stream_dedupe.worker.produce import send_batches
from stream_dedupe.worker.sizes import FRAMING, TopicLimits, record_bytes

log = logging.getLogger("stream_dedupe.worker.store")

_CHUNK = 512 << 10


def bind_event(event: Any) -> None:
    """Make ``event`` Faust's current event, so table writes are allowed and go to its partition.

    Faust only allows table writes while an agent iterates a stream one event at a time; a batch
    taken with ``stream.take_events`` has no current event. This sets the private context
    variable Faust reads, through :mod:`stream_dedupe.worker.faust_compat` (every private Faust
    API the worker uses is there).
    """
    faust_compat.set_current_event(event)


def _older_first(
    older: dict[str, list[tuple[bytes, bytes | None]]], newer: dict[str, list[tuple[bytes, bytes | None]]]
) -> dict[str, list[tuple[bytes, bytes | None]]]:
    """Unsent records of a failed send, then those written since (per namespace, in write order)."""
    merged = {namespace: list(records) for namespace, records in older.items()}
    for namespace, records in newer.items():
        merged.setdefault(namespace, []).extend(records)
    return merged


class FaustTableStore:
    """The engine's state in Faust tables.

    Args:
        tables: One Faust table per namespace (``key_type=bytes, value_type=bytes``).
        journal_dir: Local directory of the redo journal (inside the worker's state directory).
        partition: The tables' partition this store reads and writes (an index shard's number;
            the decider's tables have only partition 0).
        namespaces: The namespaces the tables must cover.

    Writes need a Faust event of the table's source stream: call :meth:`bind` with an event of
    the batch being decided before the engine commits.

    """

    def __init__(
        self,
        tables: Mapping[str, Any],
        journal_dir: Path,
        partition: int = 0,
        namespaces: Sequence[str] = tuple(NAMESPACES),
    ) -> None:
        self.partition = partition
        missing = set(namespaces) - set(tables)
        if missing:
            raise ValueError(f"no Faust table for namespaces {sorted(missing)}")
        self._tables = dict(tables)
        self._journal = Path(journal_dir) / "pending-batch.bin"
        self._event: Any = None
        #: Changelog records to send, per namespace, in the order written.
        self._unsent: dict[str, list[tuple[bytes, bytes | None]]] = {}
        #: Those of new documents' content, sent beside the journal (journal.py).
        self._unsent_content: dict[str, list[tuple[bytes, bytes | None]]] = {}
        self._unsent_journal: list[bytes] = []
        #: The topics' size limits, once read (changelog batches are cut to them).
        self.limits: TopicLimits | None = None
        #: Changelog records too large for their topic even compressed (kept locally only).
        self.oversize = 0

    def bind(self, event: Any) -> None:
        """Use ``event`` as the current event of the next writes."""
        self._event = event

    def get_many(self, namespace: str, keys: Sequence[bytes]) -> list[bytes | None]:
        """See :class:`~stream_dedupe.storage.base.KVStore`."""
        if not keys:
            return []
        return list(self._db(namespace).get(list(keys)))  # one multi-get on the RocksDB store

    def open_tables(self) -> None:
        """Open every table's local RocksDB now, before the worker reports ready.

        Faust opens a table's database at its first read or write, ~30-45 ms each on the event
        loop: a fresh or taking-over worker's first batches waited for seven of them (measured
        at 1,000 documents/s: their records' latency went to 200-370 ms for about a second).
        """
        for namespace in self._tables:
            self._db(namespace)

    def _db(self, namespace: str) -> Any:
        """The ``rocksdict.Rdict`` of the table's only partition (partition 0).

        Reads and writes go to it directly: Faust's ``Table``/``Store`` wrappers cost ~20 us per key
        (event lookup, key index, serializer registry) and, with raw serializers and one
        partition, do exactly this (faust-streaming 0.15 ``RocksDB._db_for_partition``, private).
        """
        return faust_compat.table_db(self._tables[namespace], self.partition)

    def write(self, batch: WriteSet) -> None:
        """Journal ``batch``, then apply it to the tables (see the module docstring)."""
        content, rest = split_new_content(batch, self._new_documents(batch))
        rest_blob = encode_batch(rest)
        content_blob = encode_batch(content) if content else b""
        self._journal.parent.mkdir(parents=True, exist_ok=True)
        tmp = self._journal.with_suffix(".tmp")
        tmp.write_bytes(rest_blob + content_blob)  # decodes as the whole batch
        os.replace(tmp, self._journal)
        self._apply(batch, content)
        self._unsent_journal.append(rest_blob + encode_batch(content_checks(content)) if content else rest_blob)

    def _new_documents(self, batch: WriteSet) -> list[bytes]:
        """The ids ``batch`` adds to the state: it writes their record, and the tables hold none yet."""
        if RECORDS_NAMESPACE not in self._tables:
            return []  # an index shard's tables: no documents
        added = added_documents(batch)
        before = self.get_many(RECORDS_NAMESPACE, added)  # read before _apply writes them
        return [key for key, record in zip(added, before, strict=True) if record is None]

    def _apply(self, batch: WriteSet, content: WriteSet | None = None) -> None:
        """Write ``batch`` to the local tables; queue its changelog records (``content``'s to go beside the journal)."""
        if self._event is None:
            raise RuntimeError("FaustTableStore.write needs an event: call bind(event) first")
        bind_event(self._event)  # Faust's view of the current event (partition 0)
        from rocksdict import WriteBatch

        for namespace, ops in batch.items():
            writes = WriteBatch(raw_mode=True)  # one atomic RocksDB write per table
            records = [(key, ops[key]) for key in in_key_order(ops)]  # faster memtable inserts (see in_key_order)
            for key, value in records:
                if value is None:
                    writes.delete(key)
                else:
                    writes.put(key, value)
            self._db(namespace).write(writes)
            first = content.get(namespace) if content else None
            if first:
                self._unsent_content.setdefault(namespace, []).extend(r for r in records if r[0] in first)
                records = [r for r in records if r[0] not in first]
            self._unsent.setdefault(namespace, []).extend(records)

    @property
    def pending(self) -> bool:
        """True while a journaled batch may not be fully in the changelogs yet."""
        return self._journal.exists()

    def recover(self, position_key: bytes | None = None) -> bool:
        """Re-apply a batch journaled by a process that died while writing it; True if it was re-applied.

        The local journal file comes first; then a journal found in the ``meta`` table (copied from
        its changelog: the batch a worker was writing to the changelogs when it died, read by the
        worker that rebuilt the state from them).

        Args:
            position_key: A ``meta`` key every batch writes with a growing integer (the decide
                stage's index offset). When the tables already hold a higher value, another worker
                decided after this batch (it took over and the tables were recovered from its
                changelog records): the journal is stale and is dropped, not re-applied.

        """
        applied = False
        if self._journal.exists():
            blob = self._journal.read_bytes()
            if self._replay(blob, position_key):
                applied = True
                self._unsent_journal.append(blob)
            else:
                self._journal.unlink()
        remote = self._changelog_journal()
        if remote is not None:
            tmp = self._journal.with_suffix(".tmp")
            self._journal.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_bytes(remote)
            os.replace(tmp, self._journal)  # a crash before the next settle re-applies it from here
            if self._replay(remote, position_key):
                applied = True
                self._unsent_journal.append(remote)
            else:
                self._journal.unlink()
            self._drop_changelog_journal()
        return applied

    def _replay(self, blob: bytes, position_key: bytes | None) -> bool:
        batch = decode_batch(blob)
        checks = batch.pop(CONTENT_CHECKS, None)
        if checks and not content_matches(checks, self.get_many):
            # sent beside the journal, and not all of it arrived: the batch was never written
            log.warning("dropped a journaled state batch whose new documents did not all reach the changelogs")
            return False
        if position_key is not None:
            journaled = batch.get("meta", {}).get(position_key)
            current = self.get_many("meta", [position_key])[0]
            if journaled is not None and current is not None and int(current) > int(journaled):
                return False
        self._apply(batch)
        return True

    def _changelog_journal(self) -> bytes | None:
        """The journal in the local ``meta`` table (from its changelog), if complete."""
        head = self.get_many("meta", [JOURNAL_HEAD])[0]
        if head is None:
            return None
        count, _, digest = head.partition(b":")
        chunks = self.get_many("meta", [JOURNAL_PREFIX + b"%d" % i for i in range(int(count))])
        if any(c is None for c in chunks):
            return None  # cannot happen (chunks are written before their head); a damaged state
        blob = b"".join(c for c in chunks if c is not None)
        return blob if hashlib.sha256(blob).hexdigest().encode() == digest else None

    def _drop_changelog_journal(self) -> None:
        """Remove the journal keys from the local ``meta`` table (their changelog tombstones follow)."""
        from rocksdict import WriteBatch

        db = self._db("meta")
        writes = WriteBatch(raw_mode=True)
        stale = [k for k in db.keys() if k.startswith(JOURNAL_PREFIX)]  # noqa: SIM118 - an Rdict, not a dict
        for key in stale:
            writes.delete(key)
            self._unsent.setdefault("meta", []).append((key, None))
        db.write(writes)

    async def settle(self, producer: Any) -> None:
        """Send the changelog records of the last writes, await their acks, then drop the journal.

        Order (see the module docstring): the journal to the ``meta`` changelog, beside the
        content of the documents new to the state; the other tables; ``meta``'s own records and
        the journal's tombstones. Each step is acknowledged before the next.

        Args:
            producer: A started ``aiokafka.AIOKafkaProducer`` (records go in whole batches).

        """
        unsent, self._unsent = self._unsent, {}
        content, self._unsent_content = self._unsent_content, {}
        journals, self._unsent_journal = self._unsent_journal, []
        by_namespace = {namespace: records for namespace, records in unsent.items() if records}
        if not by_namespace and not content:
            self._journal.unlink(missing_ok=True)
            return
        meta = by_namespace.pop("meta", [])
        # One topic only (nothing but meta): a single record batch is appended atomically.
        journal = self._journal_records(b"".join(journals)) if journals and by_namespace else []
        try:
            # the new documents' content beside the journal, which checks that it all arrived
            first = dict(content)
            if journal:
                first["meta"] = journal
            if first:
                if fault_armed("settle-lost-content"):  # the tests: the journal arrives, the content does not
                    first = {"meta": journal} if journal else {}
                await self._send(producer, first)
                fault_point("settle-journal")
                fault_point("settle-lost-content")
            await self._send(producer, by_namespace)
            fault_point("settle-tables")
            tombstones: list[tuple[bytes, bytes | None]] = [(key, None) for key, _ in journal[::-1]]  # head first
            await self._send(producer, {"meta": meta + tombstones})
        except BaseException:
            # Sent again, whole sequence, by the next settle (puts of final values are idempotent).
            self._unsent = _older_first(unsent, self._unsent)
            self._unsent_content = _older_first(content, self._unsent_content)
            self._unsent_journal = journals + self._unsent_journal
            raise
        self._journal.unlink(missing_ok=True)

    def _journal_records(self, blob: bytes) -> list[tuple[bytes, bytes | None]]:
        """The journal as ``meta`` changelog records: its chunks, then the head naming them."""
        chunk = _CHUNK
        if self.limits is not None:
            room = self.limits.max_bytes(self._tables["meta"].changelog_topic_name) - FRAMING - 64
            chunk = max(min(chunk, room), 1024)
        parts = [blob[i : i + chunk] for i in range(0, len(blob), chunk)] or [b""]
        records: list[tuple[bytes, bytes | None]] = [(JOURNAL_PREFIX + b"%d" % i, p) for i, p in enumerate(parts)]
        records.append((JOURNAL_HEAD, b"%d:%s" % (len(parts), hashlib.sha256(blob).hexdigest().encode())))
        return records

    async def _send(self, producer: Any, by_namespace: Mapping[str, list[tuple[bytes, bytes | None]]]) -> None:
        """Send changelog records (whole batches, cut to the topics' limits) and await every ack."""
        pending = []
        for namespace, records in by_namespace.items():
            topic = self._tables[namespace].changelog_topic_name
            limit = self.limits.max_bytes(topic) if self.limits is not None else None
            fitting = records
            if limit is not None and not _all_fit(records, limit):
                fitting = [r for r in records if self._fits(producer, topic, limit, r)]
            for future, count in await send_batches(producer, topic, self.partition, fitting, max_bytes=limit):
                pending.append((namespace, topic, future, count))
        for namespace, topic, future, count in pending:
            metadata = await future
            last = metadata.offset + count - 1
            faust_compat.set_persisted_offset(self._tables[namespace], topic, self.partition, last)

    def _fits(self, producer: Any, topic: str, limit: int, record: tuple[bytes, bytes | None]) -> bool:
        """True when a changelog record fits its topic (compressed, when it is that large)."""
        key, value = record
        if record_bytes(key, value) <= limit:
            return True
        from stream_dedupe.worker.sizes import compressed_size

        if compressed_size(value or b"", getattr(producer, "_compression_type", None)) + FRAMING + len(key) < limit:
            return True
        self.oversize += 1
        log.error(
            "state value %r of %d bytes does not fit the changelog %s (max.message.bytes %d) even compressed: it "
            "is kept in the local state only (a lost disk loses it); raise the topic's max.message.bytes",
            key[:80],
            len(value or b""),
            topic,
            limit,
        )
        return False

    def items(self, namespace: str) -> Iterator[tuple[bytes, bytes]]:
        """See :class:`~stream_dedupe.storage.base.KVStore`."""
        yield from sorted(self.scan(namespace))

    def scan(self, namespace: str) -> Iterator[tuple[bytes, bytes]]:
        """All pairs of a namespace in the store's own order, read lazily (no sort, no copy).

        For periodic statistics: :meth:`items` sorts the whole table first, which blocked the
        event loop for seconds at a few hundred thousand documents (heartbeats expired).
        """
        hidden = faust_compat.OFFSET_KEY  # Faust's changelog position, in the same RocksDB
        for key, value in self._db(namespace).items():
            if key != hidden:
                yield key, value

    def count(self, namespace: str) -> int:
        """See :class:`~stream_dedupe.storage.base.KVStore` (a scan of the local store)."""
        hidden = faust_compat.OFFSET_KEY
        return sum(1 for key in self._db(namespace).keys() if key != hidden)  # noqa: SIM118 - an Rdict

    def close(self) -> None:
        """Nothing to do: Faust owns the tables and closes them when the worker stops."""


def _all_fit(records: list[tuple[bytes, bytes | None]], limit: int) -> bool:
    """True when even the largest record fits ``limit`` uncompressed (:func:`record_bytes`, no headers).

    One pass over the lengths instead of a call per record: the changelogs get ~8 records a
    document, and nearly all are far below any topic's limit.
    """
    if not records:
        return True
    largest = max(len(key) + (len(value) if value is not None else 0) for key, value in records)
    return record_bytes(b"", None) + largest <= limit
