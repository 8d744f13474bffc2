"""RocksDB memory of the worker's Faust tables: one budget for every table.

Faust opens each table's store with its own defaults (``faust.stores.rocksdb.RocksDBOptions``):
a 2 GiB block cache per table and three 64 MB memtables, for about ten tables - far past the
chart's 2 GiB memory limit once the state grows. The worker gives every table the options of
the embedded state (:mod:`stream_dedupe.storage.rocks`: zstd or no compression per namespace,
small memtables with bloom filters, universal compaction for the large namespaces) and bounds them
together:

* one LRU block cache of ``rocksdb_memory_mb`` shared by every table, holding the data blocks and
  the index and filter blocks (``cache_index_and_filter_blocks``: the filters of a large state
  would otherwise live outside any bound);
* one write buffer manager over every table's memtables, limited to half the budget and charged
  to the same cache, so that the cache and the memtables together stay within the budget; each
  table's memtables are twice the embedded state's (the worker also bulk-loads the tables from the
  changelogs), three of them, at most a quarter of the memtable budget each.

Python's own memory (the engine's LSH band tables: about 0.5 KB per document, and after a restart
the signatures read to rebuild them) comes on top; see BENCHMARKS.md ("Worker memory").
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from rocksdict import BlockBasedOptions, Cache, WriteBufferManager

from stream_dedupe.storage import rocks
from stream_dedupe.worker import faust_compat

#: Share of the budget the memtables of all tables may take (charged to the shared cache).
MEMTABLE_SHARE = 0.5


def table_options(namespace: str, cache: Any, write_buffer_manager: Any, write_buffer_bytes: int) -> Any:
    """The rocksdict ``Options`` of one table: the embedded state's, bounded by the shared cache."""
    opts = rocks._options(namespace, cache)
    table = BlockBasedOptions()
    table.set_bloom_filter(10, False)
    table.set_block_cache(cache)
    table.set_cache_index_and_filter_blocks(True)
    table.set_pin_l0_filter_and_index_blocks_in_cache(True)
    if namespace == "documents":
        table.set_block_size(rocks.DOCUMENTS_BLOCK_BYTES)
    opts.set_block_based_table_factory(table)
    opts.set_write_buffer_size(write_buffer_bytes)
    opts.set_max_write_buffer_number(3)
    opts.set_write_buffer_manager(write_buffer_manager)
    return opts


def bound_tables(tables: Mapping[str, Any], memory_mb: int) -> dict[str, int]:
    """Open every table's RocksDB store with the shared cache and memtable budget of ``memory_mb``.

    Must run before any table partition is opened. Returns each table's memtable size in bytes.
    """
    budget = memory_mb << 20
    cache = Cache(budget)
    memtables = int(budget * MEMTABLE_SHARE)
    manager = WriteBufferManager.new_write_buffer_manager_with_cache(memtables, False, cache)
    sizes: dict[str, int] = {}
    options: dict[str, Any] = {}
    for namespace in tables:
        preferred = rocks.DOCUMENTS_WRITE_BUFFER_BYTES if namespace == "documents" else rocks.WRITE_BUFFER_BYTES
        # Twice the embedded state's memtable sizes (bulk copies from the changelogs); at most a quarter of the budget.
        sizes[namespace] = min(2 * preferred, max(1 << 20, memtables // 4))
        options[namespace] = faust_compat.bounded_rocksdb_options(
            functools.partial(table_options, namespace, cache, manager, sizes[namespace])
        )
    faust_compat.set_table_options(tables, options)
    return sizes
