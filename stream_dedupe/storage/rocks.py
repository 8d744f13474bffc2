"""RocksDB :class:`~stream_dedupe.storage.base.KVStore` through rocksdict (raw bytes mode).

Each namespace is a column family; a batch is one RocksDB ``WriteBatch`` with the WAL on, so a
crash or kill leaves either all or none of a batch's decisions.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, cast

from rocksdict import BlockBasedOptions, DBCompressionType, Options, Rdict, WriteBatch

from stream_dedupe.errors import StateError
from stream_dedupe.storage.base import NAMESPACES, WriteSet


def _options(bloom: bool = False) -> Any:
    opts = Options(raw_mode=True)
    if bloom:
        # Most LSH and document lookups miss: a bloom filter answers those without a disk read.
        table = BlockBasedOptions()
        table.set_bloom_filter(10, False)
        opts.set_block_based_table_factory(table)
    opts.create_if_missing(True)
    opts.create_missing_column_families(True)
    opts.set_compression_type(DBCompressionType.lz4())
    opts.increase_parallelism(2)
    return opts


class RocksStore:
    """A RocksDB database with one column family per namespace.

    Args:
        path: The state directory (created if missing).

    Raises:
        StateError: if the directory is locked by another process or cannot be opened.

    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            opts = _options()
            self._db = Rdict(str(self.path), opts, column_families={ns: _options(bloom=True) for ns in NAMESPACES})
        except Exception as exc:
            text = str(exc)
            if "lock" in text.lower():
                raise StateError(
                    f"state directory {self.path} is in use by another stream-dedupe process "
                    f"(RocksDB lock held): stop that process or use another --state directory ({text})"
                ) from exc
            raise StateError(f"cannot open state directory {self.path}: {text}") from exc
        self._cf = {ns: self._db.get_column_family(ns) for ns in NAMESPACES}
        self._handles = {ns: self._db.get_column_family_handle(ns) for ns in NAMESPACES}

    def get_many(self, namespace: str, keys: Sequence[bytes]) -> list[bytes | None]:
        """See :class:`~stream_dedupe.storage.base.KVStore`."""
        if not keys:
            return []
        values = self._cf[namespace].get(list(keys))
        return cast("list[bytes | None]", values)

    def write(self, batch: WriteSet) -> None:
        """See :class:`~stream_dedupe.storage.base.KVStore`."""
        wb = WriteBatch(raw_mode=True)
        for namespace, ops in batch.items():
            handle = self._handles[namespace]
            for key, value in ops.items():
                if value is None:
                    wb.delete(key, handle)
                else:
                    wb.put(key, value, handle)
        self._db.write(wb)

    def items(self, namespace: str) -> Iterator[tuple[bytes, bytes]]:
        """See :class:`~stream_dedupe.storage.base.KVStore`."""
        yield from self._cf[namespace].items()

    def count(self, namespace: str) -> int:
        """See :class:`~stream_dedupe.storage.base.KVStore` (RocksDB's estimate)."""
        value = self._cf[namespace].property_int_value("rocksdb.estimate-num-keys")
        return int(value or 0)

    def disk_bytes(self) -> int:
        """Bytes the state directory takes on disk."""
        return sum(f.stat().st_size for f in self.path.rglob("*") if f.is_file())

    def close(self) -> None:
        """See :class:`~stream_dedupe.storage.base.KVStore`."""
        # Column-family views and handles keep the database (and its LOCK) alive: drop them first.
        self._cf.clear()
        self._handles.clear()
        self._db.flush()
        self._db.close()
