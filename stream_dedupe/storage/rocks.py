"""RocksDB :class:`~stream_dedupe.storage.base.KVStore` through rocksdict (raw bytes mode).

Each namespace is a column family; a batch is one RocksDB ``WriteBatch``, so a crash or kill
leaves either all or none of a batch's decisions. By default every batch also goes through the
write-ahead log, so a kill keeps every committed batch. A caller that can redo lost batches (the
``dedupe`` command, whose run checkpoint is part of the state) opens the store with ``wal=False``:
writes skip the log, and every flush persists all namespaces at one batch boundary (atomic flush),
so a kill keeps the state as of the last flush, consistent, possibly some batches old.

The per-namespace options (compression, block and memtable sizes, compaction style) were chosen
by measuring 1M documents (BENCHMARKS.md, "At scale"). They only change how new files are
written: a state written with other options opens and reads the same (RocksDB records each
file's compression in the file), so no state format version is involved.
"""

from __future__ import annotations

import operator
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np
from rocksdict import (
    AccessType,
    BlockBasedOptions,
    Cache,
    DBCompactionStyle,
    DBCompressionType,
    Options,
    Rdict,
    WriteBatch,
    WriteOptions,
)

from stream_dedupe.errors import StateError, StateInUseError
from stream_dedupe.storage.base import NAMESPACES, WriteSet

#: One LRU block cache shared by every namespace of a store (RocksDB's default is one per namespace).
BLOCK_CACHE_BYTES = 64 << 20
#: Memtable size per namespace. Small: a memtable is a skip list, and seeks and inserts into a
#: large one miss the CPU caches (measured at 1M documents with 64 MB memtables: a quarter of the
#: engine's time). ``documents`` is written, rarely read, and has large values.
WRITE_BUFFER_BYTES = 8 << 20
DOCUMENTS_WRITE_BUFFER_BYTES = 32 << 20
#: Memtable bloom filter, as a share of the memtable's size (see ``_options``).
MEMTABLE_BLOOM_RATIO = 0.1
#: A run that writes less than this (the command line: its input) may leave the memtables'
#: bloom filters out (``RocksStore(memtable_bloom=False)``).
SMALL_RUN_BYTES = 4 << 20
#: The original documents are most of the state: zstd over 128 KB blocks (measured on the scale
#: corpus of bench/corpus.py: 0.43 of the raw size, against 0.81 for lz4 over 4 KB blocks). They
#: are read only to re-elect a canonical and to export, never per document.
DOCUMENTS_BLOCK_BYTES = 128 << 10
#: Signatures are random-looking integers that no codec shrinks by the 12.5% RocksDB requires
#: before it keeps a compressed block: not compressing them saves the attempt.
_INCOMPRESSIBLE = frozenset({"sigs", "sets"})
#: The large namespaces, written once per document under random keys and read rarely (documents)
#: or only for LSH candidates (signatures): universal compaction rewrites each byte about half as
#: often as leveled compaction (measured on 1M documents: 20% less compaction CPU, same size).
_UNIVERSAL = frozenset({"documents", "sigs", "sets"})
#: Sorted runs of ``documents`` before a compaction merges them (RocksDB's default: 4). The
#: originals are read only to re-elect a canonical and to export, so more runs cost little, while
#: each merge decompresses and recompresses them (zstd over 128 KB blocks): 8 cut the compaction
#: CPU by a quarter at 100,000 and 300,000 documents (BENCHMARKS.md, "Writes without the
#: write-ahead log"), far below the 20 runs at which RocksDB slows writes down.
DOCUMENTS_COMPACTION_TRIGGER = 8
#: RocksDB's info logs kept beside the current one. Every open starts a new ``LOG`` (~150 KB here:
#: it lists every column family's options) and RocksDB keeps 1,000 old ones by default, so a
#: state read by a command every hour, or a worker's table restarted, grew by up to ~150 MB of
#: ``LOG.old.*`` files; a few are enough to read what the last runs logged.
KEEP_LOG_FILES = 5


def _options(namespace: str | None = None, cache: Any = None, memtable_bloom: bool = True, wal: bool = True) -> Any:
    opts = Options(raw_mode=True)
    opts.create_if_missing(True)
    opts.create_missing_column_families(True)
    opts.set_compression_type(DBCompressionType.lz4())
    opts.increase_parallelism(2)
    opts.set_keep_log_file_num(KEEP_LOG_FILES)
    if namespace is None:
        # without the log, a flush of one namespace alone could persist half of a batch: flush
        # them all together (a memtable filling up, and the close)
        opts.set_atomic_flush(not wal)
        return opts
    # Most LSH and document lookups miss: a bloom filter answers those without a disk read, and
    # one over each memtable answers them without a skip-list seek.
    table = BlockBasedOptions()
    table.set_bloom_filter(10, False)
    table.set_block_cache(cache)
    opts.set_memtable_whole_key_filtering(True)
    opts.set_memtable_prefix_bloom_ratio(MEMTABLE_BLOOM_RATIO if memtable_bloom else 0.0)
    opts.set_write_buffer_size(WRITE_BUFFER_BYTES)
    # zstd: the small records (JSON, hex hashes, ids) shrink ~2x, lz4 ~1.2x; 4 KB blocks keep a
    # point read's decompression short.
    opts.set_compression_type(DBCompressionType.zstd())
    if namespace == "documents":
        table.set_block_size(DOCUMENTS_BLOCK_BYTES)
        opts.set_write_buffer_size(DOCUMENTS_WRITE_BUFFER_BYTES)
        opts.set_level_zero_file_num_compaction_trigger(DOCUMENTS_COMPACTION_TRIGGER)
    elif namespace in _INCOMPRESSIBLE:
        opts.set_compression_type(DBCompressionType.none())
    if namespace in _UNIVERSAL:
        opts.set_compaction_style(DBCompactionStyle.universal())
    opts.set_block_based_table_factory(table)
    return opts


def tree_bytes(path: Path) -> int:
    """Bytes of the files under ``path`` (files RocksDB removes during the walk are skipped)."""
    total = 0
    for f in path.rglob("*"):
        try:
            if f.is_file():
                total += f.stat().st_size
        except OSError:
            continue
    return total


#: Batches with fewer keys than this are ordered by ``sorted`` (numpy's set-up costs more).
_NUMPY_SORT_KEYS = 256


def in_key_order(ops: Mapping[bytes, bytes | None]) -> Sequence[bytes]:
    """The keys of ``ops`` in RocksDB's (bytewise) order, for one batch's memtable inserts.

    In key order each insert lands beside the one before it in the memtable's skip list: 0.8-1.1
    us a random 8-byte key instead of 1.4-2.0 (BENCHMARKS.md, "RocksDB writes in key order").
    A batch of 8-byte keys (boilerplate lines: most of a batch's keys on mail) is ordered by
    numpy as big-endian integers, the same order as bytewise: 2.2 ms against ``sorted``'s 3.7 ms
    for 12,000 keys.
    """
    keys = list(ops)
    if len(keys) < _NUMPY_SORT_KEYS or set(map(len, keys)) != {8}:
        return sorted(keys)
    order = np.frombuffer(b"".join(keys), dtype=">u8").argsort()
    # with two or more indices itemgetter returns a tuple (here at least _NUMPY_SORT_KEYS)
    return operator.itemgetter(*order.tolist())(keys)  # type: ignore[no-any-return]


class RocksStore:
    """A RocksDB database with one column family per namespace.

    Args:
        path: The state directory (created if missing).
        memtable_bloom: False for a run that writes little (under :data:`SMALL_RUN_BYTES`):
            its memtables then have no bloom filter. Each memtable's filter is allocated and
            zeroed when the memtable is created and freed at close (0.8 MB per namespace,
            3.2 MB for ``documents``: ~0.015 s of CPU, 40% of opening and closing a state, in
            a one-line ``dedupe``), and a memtable that holds a few thousand entries answers a
            miss from its skip list about as fast. Nothing on disk differs; a bigger run, the
            worker and the Python API keep the filters (BENCHMARKS.md, "At scale").
        wal: False to write without the write-ahead log, for a caller that can redo the batches
            a kill loses. Every batch is still atomic; what is persisted is every batch up to
            the last flush (a memtable filling up, or :meth:`close`), all namespaces at once.
            The log writes every byte a second time: without it a 20,000-document ``dedupe``
            is 1.2x faster (BENCHMARKS.md, "Writes without the write-ahead log").
        reader: Open an existing state that another process may be writing, to read it only
            (a RocksDB secondary instance: no lock is taken). It sees what that process had
            persisted when it was opened: every batch it committed with the log, or every batch
            up to its last flush without it (one batch boundary, all namespaces). Its own info
            log goes to a temporary directory, removed at :meth:`close`; :meth:`write` refuses.

    Raises:
        StateError: if the directory is locked by another process or cannot be opened.

    """

    def __init__(
        self, path: str | Path, *, memtable_bloom: bool = True, wal: bool = True, reader: bool = False
    ) -> None:
        self.path = Path(path)
        self.wal = wal
        self.reader = reader
        self._reader_dir = tempfile.mkdtemp(prefix="stream-dedupe-reader-") if reader else None
        try:
            opts = _options(wal=wal)
            cache = Cache(BLOCK_CACHE_BYTES)
            families = {ns: _options(ns, cache, memtable_bloom) for ns in NAMESPACES}
            if self._reader_dir is not None:
                # every table file stays open: the writer may delete one a compaction replaced
                opts.set_max_open_files(-1)
                access = AccessType.secondary(self._reader_dir)
                self._db = Rdict(str(self.path), opts, column_families=families, access_type=access)
            else:
                self.path.mkdir(parents=True, exist_ok=True)
                self._db = Rdict(str(self.path), opts, column_families=families)
        except Exception as exc:
            self._remove_reader_dir()
            text = str(exc)
            if "lock hold by current process" in text:
                raise StateInUseError(
                    f"state directory {self.path} is already open in this process: close the other handle first "
                    "(Deduper.close(), or open it in a `with` block), or use another directory"
                ) from exc
            if "lock" in text.lower():
                raise StateInUseError(
                    f"state directory {self.path} is in use by another stream-dedupe process "
                    f"(RocksDB lock held): stop that process or use another --state directory ({text})"
                ) from exc
            unwritable = "Read-only file system" in text or "Permission denied" in text
            if unwritable and not self.reader and not (self.path / "CURRENT").is_file():
                raise StateError(
                    f"cannot create state directory {self.path} (a read-only file system or mount, or no "
                    f"permission?): give --state a directory this user can write ({text})"
                ) from exc
            if unwritable:
                # rocksdict (0.3.29) writes its rocksdict-config.json at every open, read-only and
                # secondary ones too (rocksdict PR #186 stops that; not released yet)
                raise StateError(
                    f"state directory {self.path} is not writable (a read-only file system or mount?): even reading "
                    "a state writes a small file into it (rocksdict's configuration); copy the state to a writable "
                    f"directory and use that ({text})"
                ) from exc
            raise StateError(f"cannot open state directory {self.path}: {text}") from exc
        self._cf = {ns: self._db.get_column_family(ns) for ns in NAMESPACES}
        self._handles = {ns: self._db.get_column_family_handle(ns) for ns in NAMESPACES}
        if not wal:
            unlogged = WriteOptions()
            # a property at run time; rocksdict's stub declares it a method (0.3.29)
            unlogged.disable_wal = True  # type: ignore[method-assign,assignment]
            self._db.set_write_options(unlogged)

    def log_writes(self) -> None:
        """Send every later write through the write-ahead log (a store opened with ``wal=False``, before it writes)."""
        if not self.wal:
            self._db.set_write_options(WriteOptions())
            self.wal = True  # nothing is written yet (called right after opening): close as a logged store does

    def fingerprint(self) -> str:
        """The stored contents' identity: the database's unique id and its last sequence number.

        Every committed write changes it, so something derived from the state and saved with its
        fingerprint is current exactly while the fingerprint is the same (a warm start,
        :mod:`stream_dedupe.warm_file`).
        """
        identity = self.path / "IDENTITY"
        unique = identity.read_text().strip() if identity.is_file() else ""
        return f"{unique}:{self._db.latest_sequence_number()}"

    def get_many(self, namespace: str, keys: Sequence[bytes]) -> list[bytes | None]:
        """See :class:`~stream_dedupe.storage.base.KVStore`."""
        if not keys:
            return []
        values = self._cf[namespace].get(list(keys))
        return cast("list[bytes | None]", values)

    def write(self, batch: WriteSet) -> None:
        """See :class:`~stream_dedupe.storage.base.KVStore`."""
        if self.reader:
            raise StateError(f"state {self.path} is open for reading only (another process may be writing it)")
        wb = WriteBatch(raw_mode=True)
        for namespace, ops in batch.items():
            handle = self._handles[namespace]
            # in key order (faster inserts, see in_key_order): a namespace's keys are distinct,
            # so the order changes nothing stored
            for key in in_key_order(ops):
                value = ops[key]
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
        return tree_bytes(self.path)

    def namespace_bytes(self) -> dict[str, int]:
        """Bytes of each namespace's table files (memtables not yet flushed are not counted)."""
        prop = "rocksdb.total-sst-files-size"
        return {ns: int(cf.property_int_value(prop) or 0) for ns, cf in self._cf.items()}

    def compact(self) -> None:
        """Fully compact every namespace: overwritten and deleted entries leave the disk."""
        for cf in self._cf.values():
            cf.compact_range(None, None)

    def close(self) -> None:
        """See :class:`~stream_dedupe.storage.base.KVStore`."""
        if self.reader:
            self._cf.clear()
            self._handles.clear()
            self._db.close()
            self._remove_reader_dir()
            return
        failed = 0
        if not self.wal:
            # Writes not in the log: RocksDB's shutdown flush persists every namespace in one
            # atomic flush, and stops the background work. (Dropping the views flushes them one
            # at a time: a kill between two of those would leave half of the last batches on
            # disk; after the shutdown flush they have nothing left to flush.)
            self._db.cancel_all_background(True)
            failed = int(self._db.property_int_value("rocksdb.background-errors") or 0)
        # Column-family views and handles keep the database (and its LOCK) alive: drop them first.
        self._cf.clear()
        self._handles.clear()
        if self.wal:
            self._db.flush()
            self._db.close()
            return
        try:
            self._db.close()  # its flush finds RocksDB shut down; the database is released all the same
        except Exception as exc:
            if "Shutdown in progress" not in str(exc):
                raise
        if failed:  # the shutdown flush reports nothing itself: without the log, say what is lost
            raise StateError(
                f"writing the state {self.path} to disk failed ({failed} RocksDB background error(s); "
                "see its LOG file): the batches since its last flush are not stored. Fix the cause "
                "(e.g. free disk space) and run the same command again: it resumes from the last flush"
            )

    def _remove_reader_dir(self) -> None:
        if self._reader_dir is not None:
            shutil.rmtree(self._reader_dir, ignore_errors=True)
            self._reader_dir = None
