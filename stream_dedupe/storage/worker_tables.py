"""A Kafka worker's state directory, read by the inspection commands (``stats``, ``clusters``, ...).

The worker keeps each namespace of the state in a Faust table: one RocksDB per namespace, at
``<state-dir>/v1/tables/state-<namespace>-0.db``, with Faust's own changelog offsets beside the
values (keys starting with ``__faust``). :class:`WorkerTablesStore` reads them as one
:class:`~stream_dedupe.storage.base.KVStore`, without a lock (a RocksDB secondary instance per
table), so that an operator can run the alerts' runbook commands on a running worker's pod.

Each table is seen as the worker had persisted it when it was opened; the tables are separate
databases, so a batch being written may show in some of them only. Good enough to inspect a
cluster or the learned lines, not to copy a state (``worker-reshard`` does that).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import cast

from rocksdict import AccessType, Options, Rdict

from stream_dedupe.errors import StateError
from stream_dedupe.storage.base import NAMESPACES, WriteSet

#: Keys Faust keeps in every table beside the values (its changelog offsets).
FAUST_KEY_PREFIX = b"__faust"


def table_path(state_dir: Path, namespace: str) -> Path:
    """Where a worker keeps a namespace of its state (the table of the index partition, 0)."""
    return state_dir / "v1" / "tables" / f"state-{namespace}-0.db"


def is_worker_state(state_dir: Path) -> bool:
    """Whether ``state_dir`` is a Kafka worker's state directory (its ``docs`` table exists)."""
    return (table_path(state_dir, "docs") / "CURRENT").exists()


class WorkerTablesStore:
    """A worker's Faust tables as one read-only :class:`~stream_dedupe.storage.base.KVStore`.

    Args:
        state_dir: The worker's ``--state-dir``.

    Raises:
        StateError: if a table cannot be opened.

    """

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir
        self._scratch = tempfile.mkdtemp(prefix="stream-dedupe-worker-reader-")
        self._tables: dict[str, Rdict] = {}
        try:
            for namespace in NAMESPACES:
                path = table_path(state_dir, namespace)
                if not (path / "CURRENT").exists():
                    continue  # a table the worker has not written yet (e.g. the index of a sharded decider)
                options = Options(raw_mode=True)
                options.set_max_open_files(-1)  # the worker may delete a file a compaction replaced
                secondary = AccessType.secondary(str(Path(self._scratch) / namespace))
                self._tables[namespace] = Rdict(str(path), options, access_type=secondary)
        except Exception as exc:
            self.close()
            raise StateError(
                f"cannot read the worker's state in {state_dir}: {exc} (the directory must be writable: "
                "rocksdict writes a small configuration file at every open)"
            ) from exc

    def get_many(self, namespace: str, keys: Sequence[bytes]) -> list[bytes | None]:
        """See :class:`~stream_dedupe.storage.base.KVStore`."""
        table = self._tables.get(namespace)
        if table is None or not keys:
            return [None] * len(keys)
        return cast("list[bytes | None]", table.get(list(keys)))

    def write(self, batch: WriteSet) -> None:
        """Refused: the worker owns its state."""
        raise StateError(f"the worker's state in {self.path} is open for reading only")

    def items(self, namespace: str) -> Iterator[tuple[bytes, bytes]]:
        """See :class:`~stream_dedupe.storage.base.KVStore` (Faust's offset keys left out)."""
        table = self._tables.get(namespace)
        if table is None:
            return
        for key, value in table.items():
            raw = cast(bytes, key)  # raw mode: bytes keys and values
            if not raw.startswith(FAUST_KEY_PREFIX):
                yield raw, cast(bytes, value)

    def count(self, namespace: str) -> int:
        """See :class:`~stream_dedupe.storage.base.KVStore` (RocksDB's estimate)."""
        table = self._tables.get(namespace)
        return 0 if table is None else int(table.property_int_value("rocksdb.estimate-num-keys") or 0)

    def close(self) -> None:
        """See :class:`~stream_dedupe.storage.base.KVStore`."""
        for table in self._tables.values():
            table.close()
        self._tables.clear()
        shutil.rmtree(self._scratch, ignore_errors=True)
