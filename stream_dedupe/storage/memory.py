"""In-memory :class:`~stream_dedupe.storage.base.KVStore`: tests, one-shot runs, the oracle."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from stream_dedupe.storage.base import NAMESPACES, WriteSet


class MemoryStore:
    """Dicts, one per namespace."""

    def __init__(self) -> None:
        self._data: dict[str, dict[bytes, bytes]] = {ns: {} for ns in NAMESPACES}

    def get_many(self, namespace: str, keys: Sequence[bytes]) -> list[bytes | None]:
        """See :class:`~stream_dedupe.storage.base.KVStore`."""
        table = self._data[namespace]
        return [table.get(key) for key in keys]

    def write(self, batch: WriteSet) -> None:
        """See :class:`~stream_dedupe.storage.base.KVStore`."""
        for namespace, ops in batch.items():
            table = self._data[namespace]
            for key, value in ops.items():
                if value is None:
                    table.pop(key, None)
                else:
                    table[key] = value

    def items(self, namespace: str) -> Iterator[tuple[bytes, bytes]]:
        """See :class:`~stream_dedupe.storage.base.KVStore`."""
        table = self._data[namespace]
        for key in sorted(table):
            yield key, table[key]

    def count(self, namespace: str) -> int:
        """See :class:`~stream_dedupe.storage.base.KVStore`."""
        return len(self._data[namespace])

    def close(self) -> None:
        """See :class:`~stream_dedupe.storage.base.KVStore`."""
