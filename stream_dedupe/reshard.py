"""``stream-dedupe reshard``: copy a state into a new one with another number of index shards.

A re-shard moves data and decides nothing: the gather's namespaces (records, union-find, edges,
exact groups, originals, learned boilerplate, counters and positions) are copied as they are, and
each document's signature, shingle set and joined bands go to its owner under the new count (or
into the gather's own store for 1 shard). An interrupted commit of the source is finished first.
The new state answers exactly as the old one would: the same clusters, representatives and
events for the documents that follow, and a resumed ``dedupe`` run continues where the old
state stopped.

The copy is built in a hidden sibling directory (``.<name>.reshard-partial``) and renamed into
place once every store is closed, so an interrupted re-shard (an error, Ctrl-C, kill -9) leaves
no half-copied directory that could be taken for a state; the next re-shard into the same
target removes what an interrupted one left. The stores are written without RocksDB's
write-ahead log (a copy is only ever used whole; 1.2-1.35x faster at 100,000 documents,
BENCHMARKS.md "Writes without the write-ahead log").

The Kafka worker re-shards by a new app id (docs/sharding.md, "Re-sharding a worker deployment").
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer

from stream_dedupe.errors import ConfigError

#: Keys copied per write.
CHUNK = 8192


def reshard(source: Path, target: Path, shards: int) -> dict[str, int]:
    """Copy the state ``source`` into the new state ``target`` with ``shards`` index shards.

    Returns:
        Counts: documents, signatures, shingle sets and band entries copied; the shard count.

    Raises:
        ConfigError: if ``target`` is not new or empty, or nests with ``source``, or ``shards`` is below 1.

    """
    from stream_dedupe.cli_support import check_new_state_dir, open_existing
    from stream_dedupe.core.layout import resolve
    from stream_dedupe.core.sharding.gather import ShardedStore

    if shards < 1:
        raise ConfigError(f"--index-shards must be 1 (no shards) or more, got {shards}")
    check_new_state_dir(target, "--to")
    inside = target.resolve().is_relative_to(source.resolve()) or source.resolve().is_relative_to(target.resolve())
    if inside:
        raise ConfigError(
            f"--to {target} and --state {source} nest one inside the other: give the copy a directory of its own "
            "(beside the state, e.g. its name with a suffix)"
        )
    store, params = open_existing(source)
    building = partial_dir(target)
    shutil.rmtree(building, ignore_errors=True)  # what an interrupted re-shard into the same target left
    try:
        params = resolve(params)
        number = 0
        if isinstance(store, ShardedStore):
            store.attach(params.bands, params.rows, 1)
            store.connect()  # finishes an interrupted commit of the source
            number = store.number
        counts = _copy_state(store, params, number, building, shards)
        _move_into_place(building, target)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    finally:
        store.close()
    return counts


def _copy_state(store: Any, params: Any, number: int, target: Path, shards: int) -> dict[str, int]:
    """Copy the opened state ``store`` into new stores under ``target``; the counts of :func:`reshard`."""
    from stream_dedupe.core.sharding.gather import LAYOUT_KEY, OUTBOX_KEY, ShardedStore, owner
    from stream_dedupe.core.sharding.ops import ShardOps, encode_all
    from stream_dedupe.core.sharding.outbox import is_outbox_key
    from stream_dedupe.core.sharding.shard import SHARDED_NAMESPACES, shard_meta
    from stream_dedupe.sharded_state import ProcessShards
    from stream_dedupe.storage.base import NAMESPACES
    from stream_dedupe.storage.rocks import RocksStore
    from stream_dedupe.storage.state import DocRecord, skipped_bands_of

    counts = {"shards": shards}
    local_out = RocksStore(target, wal=False)
    parts = [RocksStore(target / "shards" / str(i), wal=False) for i in range(shards)] if shards > 1 else []
    try:
        source_local = store.local if isinstance(store, ShardedStore) else store
        for ns in NAMESPACES:
            if ns in SHARDED_NAMESPACES and parts:
                continue
            items = store.items(ns) if ns in SHARDED_NAMESPACES else source_local.items(ns)
            kept = ((k, v) for k, v in items if ns != "meta" or not (k == LAYOUT_KEY or is_outbox_key(k)))
            counts[ns] = _copy(kept, lambda k: local_out, ns)
        if not parts:
            return counts
        meta = {LAYOUT_KEY: str(shards).encode(), OUTBOX_KEY: encode_all(number, [ShardOps()] * shards)}
        local_out.write({"meta": meta})
        for ns in SHARDED_NAMESPACES:
            counts[ns] = _copy(store.items(ns), lambda k: parts[owner(k, shards)], ns)
        if isinstance(store, ShardedStore):
            client = store.client
            assert isinstance(client, ProcessShards)
            bitmaps: Iterator[tuple[bytes, bytes]] = (
                pair for i in range(store.shards) for pair in client.items("docs", i)
            )
        else:  # an unsharded index: every band but those a document found full (kept in the state's meta)
            none = np.zeros(params.bands, dtype=np.uint8)
            skipped = skipped_bands_of(source_local, params.bands)
            bitmaps = (
                (k, np.packbits(skipped.get(k, none) == 0).tobytes())
                for k, v in source_local.items("docs")
                if DocRecord.decode(v).indexed
            )
        counts["band_bitmaps"] = _copy(bitmaps, lambda k: parts[owner(k, shards)], "docs")
        for i, part in enumerate(parts):
            part.write({"meta": shard_meta(i, shards, params.bands, params.rows, number)})
        return counts
    finally:
        for part in parts:
            part.close()
        local_out.close()


def partial_dir(target: Path) -> Path:
    """Where a re-shard into ``target`` builds the copy before renaming it into place."""
    return target.parent / f".{target.name}.reshard-partial"


def _move_into_place(built: Path, target: Path) -> None:
    """Rename the finished copy to ``target`` (missing, or an empty directory) and make the rename durable."""
    os.replace(built, target)  # a rename: replaces an empty directory, never a non-empty one
    directory = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def _copy(items: Iterator[tuple[bytes, bytes]], where: Any, namespace: str) -> int:
    """Write ``items`` into ``namespace`` of the store ``where(key)`` picks, in chunks; how many."""
    pending: dict[int, tuple[Any, dict[bytes, bytes | None]]] = {}
    copied = 0
    for key, value in items:
        target = where(key)
        batch = pending.setdefault(id(target), (target, {}))[1]
        batch[key] = value
        copied += 1
        if len(batch) >= CHUNK:
            target.write({namespace: batch})
            pending.pop(id(target))
    for target, batch in pending.values():
        target.write({namespace: batch})
    return copied


def reshard_command(
    state: Annotated[Path, typer.Option(help="The state to copy (left unchanged).")],
    to: Annotated[Path, typer.Option(help="The new state directory (created; must be new or empty).")],
    index_shards: Annotated[int, typer.Option(help="Index shards of the new state (1: none).")],
) -> None:
    """Copy a state into a new one with another number of index shards (decides nothing)."""
    from stream_dedupe.consoles import stderr_console

    counts = reshard(state, to, index_shards)
    stderr_console().print(
        f"copied {counts.get('docs', 0):,} documents into {to} with {index_shards} index shard(s): "
        f"{counts.get('sigs', 0):,} signatures, {counts.get('sets', 0):,} shingle sets; "
        f"run `stream-dedupe dedupe ... --state {to}` to go on"
    )
