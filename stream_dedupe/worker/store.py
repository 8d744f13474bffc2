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
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from stream_dedupe.storage.base import NAMESPACES, WriteSet
from stream_dedupe.worker import faust_compat

_HEAD = struct.Struct("<BIi")  # namespace name length, key length, value length (-1: delete)


def bind_event(event: Any) -> None:
    """Make ``event`` Faust's current event, so table writes are allowed and go to its partition.

    Faust only allows table writes while an agent iterates a stream one event at a time; a batch
    taken with ``stream.take_events`` has no current event. This sets the private context
    variable Faust reads, through :mod:`stream_dedupe.worker.faust_compat` (every private Faust
    API the worker uses is there).
    """
    faust_compat.set_current_event(event)


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
    """Inverse of :func:`encode_batch`."""
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


Headers = Sequence[tuple[str, bytes]]


async def send_batches(
    producer: Any,
    topic: str,
    partition: int,
    records: Sequence[tuple[bytes | None, bytes | None]],
    headers: Sequence[Headers] | None = None,
) -> list[tuple[Any, int]]:
    """Send records to one partition as whole producer batches; ``(ack future, records)`` per batch.

    One ``send_batch`` per ~1 MB instead of one ``send`` per record: the changelog of a batch of
    500 documents is a few thousand records.
    """
    out: list[tuple[Any, int]] = []
    batch, count = producer.create_batch(), 0
    for i, (key, value) in enumerate(records):
        extra = list(headers[i]) if headers else []
        if batch.append(key=key, value=value, timestamp=None, headers=extra) is None:
            if count == 0:
                raise ValueError(f"a record of {len(value or b'')} bytes does not fit a producer batch ({topic})")
            batch.close()
            out.append((await producer.send_batch(batch, topic, partition=partition), count))
            batch, count = producer.create_batch(), 0
            if batch.append(key=key, value=value, timestamp=None, headers=extra) is None:
                raise ValueError(f"a record of {len(value or b'')} bytes does not fit a producer batch ({topic})")
        count += 1
    if count:
        batch.close()
        out.append((await producer.send_batch(batch, topic, partition=partition), count))
    return out


class FaustTableStore:
    """The engine's state in Faust tables.

    Args:
        tables: One Faust table per namespace (``key_type=bytes, value_type=bytes``, 1 partition).
        journal_dir: Local directory of the redo journal (inside the worker's state directory).

    Writes need a Faust event of the table's source stream: call :meth:`bind` with an event of
    the batch being decided before the engine commits.

    """

    def __init__(self, tables: Mapping[str, Any], journal_dir: Path) -> None:
        missing = set(NAMESPACES) - set(tables)
        if missing:
            raise ValueError(f"no Faust table for namespaces {sorted(missing)}")
        self._tables = dict(tables)
        self._journal = Path(journal_dir) / "pending-batch.bin"
        self._event: Any = None
        self._unsent: list[tuple[str, bytes, bytes | None]] = []

    def bind(self, event: Any) -> None:
        """Use ``event`` as the current event of the next writes."""
        self._event = event

    def get_many(self, namespace: str, keys: Sequence[bytes]) -> list[bytes | None]:
        """See :class:`~stream_dedupe.storage.base.KVStore`."""
        if not keys:
            return []
        return list(self._db(namespace).get(list(keys)))  # one multi-get on the RocksDB store

    def _db(self, namespace: str) -> Any:
        """The ``rocksdict.Rdict`` of the table's only partition (partition 0).

        Reads and writes go to it directly: Faust's ``Table``/``Store`` wrappers cost ~20 us per key
        (event lookup, key index, serializer registry) and, with raw serializers and one
        partition, do exactly this (faust-streaming 0.15 ``RocksDB._db_for_partition``, private).
        """
        return faust_compat.table_db(self._tables[namespace])

    def write(self, batch: WriteSet) -> None:
        """Journal ``batch``, then apply it to the tables (see the module docstring)."""
        self._journal.parent.mkdir(parents=True, exist_ok=True)
        tmp = self._journal.with_suffix(".tmp")
        tmp.write_bytes(encode_batch(batch))
        os.replace(tmp, self._journal)
        self._apply(batch)

    def _apply(self, batch: WriteSet) -> None:
        if self._event is None:
            raise RuntimeError("FaustTableStore.write needs an event: call bind(event) first")
        bind_event(self._event)  # Faust's view of the current event (partition 0)
        from rocksdict import WriteBatch

        for namespace, ops in batch.items():
            writes = WriteBatch(raw_mode=True)  # one atomic RocksDB write per table
            for key, value in ops.items():
                if value is None:
                    writes.delete(key)
                else:
                    writes.put(key, value)
                self._unsent.append((namespace, key, value))
            self._db(namespace).write(writes)

    @property
    def pending(self) -> bool:
        """True while a journaled batch may not be fully in the changelogs yet."""
        return self._journal.exists()

    def recover(self, position_key: bytes | None = None) -> bool:
        """Re-apply a batch journaled by a process that died while writing it; True if it was re-applied.

        Args:
            position_key: A ``meta`` key every batch writes with a growing integer (the decide
                stage's index offset). When the tables already hold a higher value, another worker
                decided after this batch (it took over and the tables were recovered from its
                changelog records): the journal is stale and is dropped, not re-applied.

        """
        if not self._journal.exists():
            return False
        batch = decode_batch(self._journal.read_bytes())
        if position_key is not None:
            journaled = batch.get("meta", {}).get(position_key)
            current = self.get_many("meta", [position_key])[0]
            if journaled is not None and current is not None and int(current) > int(journaled):
                self._journal.unlink()
                return False
        self._apply(batch)
        return True

    async def settle(self, producer: Any) -> None:
        """Send the changelog records of the last writes, await their acks, then drop the journal.

        Args:
            producer: A started ``aiokafka.AIOKafkaProducer`` (records go in whole batches).

        """
        unsent, self._unsent = self._unsent, []
        by_namespace: dict[str, list[tuple[bytes, bytes | None]]] = {}
        for namespace, key, value in unsent:
            by_namespace.setdefault(namespace, []).append((key, value))
        pending = []
        for namespace, records in by_namespace.items():
            topic = self._tables[namespace].changelog_topic_name
            for future, count in await send_batches(producer, topic, 0, records):
                pending.append((namespace, topic, future, count))
        for namespace, topic, future, count in pending:
            metadata = await future
            last = metadata.offset + count - 1
            faust_compat.set_persisted_offset(self._tables[namespace], topic, 0, last)
        self._journal.unlink(missing_ok=True)

    def items(self, namespace: str) -> Iterator[tuple[bytes, bytes]]:
        """See :class:`~stream_dedupe.storage.base.KVStore`."""
        yield from sorted(self._tables[namespace].items())

    def count(self, namespace: str) -> int:
        """See :class:`~stream_dedupe.storage.base.KVStore` (a scan of the local store)."""
        return len(self._tables[namespace])

    def close(self) -> None:
        """Nothing to do: Faust owns the tables and closes them when the worker stops."""
