"""A sharded state on disk: the gather's RocksDB and one process per index shard, each with its own.

``dedupe --index-shards S`` (S >= 2) keeps the index's heavy part, the signatures, shingle sets and
band tables, in S shard processes (:class:`ProcessShards`), each owning the documents whose id
hashes to it, with its own RocksDB under ``STATE/shards/<i>``. The deciding process (the gather)
keeps the rest in ``STATE`` itself and holds no band table. See :mod:`stream_dedupe.core.sharding`
for the protocol, and ``docs/sharding.md`` for what it is for: a shard's memory and disk are its
share of the index, so the shards can be placed apart; on one machine they also run beside the
gather, on other cores.

The shard processes are spawned (the gather already runs RocksDB threads), ignore Ctrl-C (the
command stops after its batch) and die with the command (PDEATHSIG). A shard process that dies
fails the run with a message; the state is consistent up to the last commit and the next run
finishes an interrupted commit from the gather's outbox.
"""

from __future__ import annotations

import os
import resource
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from stream_dedupe.core.sharding.gather import LAYOUT_KEY, ShardedStore, merge_members, owner
from stream_dedupe.core.sharding.ops import ShardOps
from stream_dedupe.errors import ConfigError, StreamDedupeError

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

    from stream_dedupe.storage.base import KVStore

_ITEMS_CHUNK = 4096


class ShardProcessError(StreamDedupeError):
    """An index shard's process failed; the message says what to do."""


def _serve(conn: Connection, root: str, shard: int, shards: int, parent: int) -> None:  # pragma: no cover - child
    from stream_dedupe.core.sharding.shard import IndexShard
    from stream_dedupe.sign_pool import init_child
    from stream_dedupe.storage.rocks import RocksStore

    init_child(parent)
    store = RocksStore(Path(root) / str(shard))
    part: IndexShard | None = None
    iterators: dict[int, Iterator[tuple[bytes, bytes]]] = {}
    while True:
        method, args = conn.recv()
        try:
            if method == "configure":
                part = IndexShard(store, shard, shards, *args)
                result: Any = part.applied
            elif method == "close":
                store.close()
                conn.send(("ok", None))
                return
            elif method == "count":
                result = store.count(args[0])
            elif method == "items":
                token, namespace = args
                it = iterators.setdefault(token, store.items(namespace))
                result = [pair for _, pair in zip(range(_ITEMS_CHUNK), it, strict=False)]
                if len(result) < _ITEMS_CHUNK:
                    iterators.pop(token, None)
            else:
                assert part is not None, "configure first"
                if method == "apply":
                    result = part.apply(args[0], ShardOps.decode(args[1]))
                elif method == "members":
                    result = part.members(*args)
                elif method == "get_many":
                    result = part.get_many(*args)
                elif method == "stats":
                    page = os.sysconf("SC_PAGE_SIZE")
                    rss = page * int(Path("/proc/self/statm").read_text().split()[1])  # before any compaction
                    usage = resource.getrusage(resource.RUSAGE_SELF)
                    if args and args[0]:
                        store.compact()  # on-disk bytes as they settle, not with the write-ahead files
                    result = {
                        "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
                        "documents": part.documents,
                        "band_table_bytes": part.tables.nbytes,
                        "disk_bytes": store.disk_bytes(),
                        "rss_bytes": rss,
                        "peak_rss_bytes": usage.ru_maxrss * 1024,
                    }
                else:
                    raise ValueError(f"unknown shard call {method!r}")
            conn.send(("ok", result))
        except Exception as exc:  # the gather gets the message; the shard keeps serving
            conn.send(("error", f"{type(exc).__name__}: {exc}"))


class ProcessShards:
    """``shards`` index shards, one spawned process each, over ``root/<i>`` (a ShardClient).

    Args:
        shards: How many.
        root: The directory of the shards' RocksDB directories.

    """

    def __init__(self, shards: int, root: Path) -> None:
        import multiprocessing

        self.shards, self.root = shards, root
        context = multiprocessing.get_context("spawn")
        self._conns: list[Connection] = []
        self._procs = []
        self._pending = [0] * shards  # acknowledgements of applies not yet read
        self._token = 0
        root.mkdir(parents=True, exist_ok=True)
        for i in range(shards):
            mine, theirs = context.Pipe()
            proc = context.Process(
                target=_serve, args=(theirs, str(root), i, shards, os.getpid()), name=f"sd-shard-{i}", daemon=True
            )
            proc.start()
            theirs.close()
            self._conns.append(mine)
            self._procs.append(proc)

    def _send(self, shard: int, method: str, *args: Any) -> None:
        try:
            self._conns[shard].send((method, args))
        except (BrokenPipeError, OSError) as exc:
            raise self._died(shard) from exc

    def _recv(self, shard: int) -> Any:
        conn = self._conns[shard]
        try:
            while self._pending[shard]:
                self._pending[shard] -= 1
                self._check(shard, conn.recv())
            return self._check(shard, conn.recv())
        except (EOFError, OSError) as exc:
            raise self._died(shard) from exc

    def _check(self, shard: int, reply: tuple[str, Any]) -> Any:
        status, value = reply
        if status != "ok":
            raise ShardProcessError(f"index shard {shard} failed: {value}")
        return value

    def _died(self, shard: int) -> ShardProcessError:
        code = self._procs[shard].exitcode
        return ShardProcessError(
            f"index shard {shard}'s process died (exit code {code}; killed, or out of memory?); the state is "
            "consistent up to the last committed batch: run the same command again to resume"
        )

    def _all(self, method: str, *args: Any) -> list[Any]:
        for i in range(self.shards):
            self._send(i, method, *args)
        return [self._recv(i) for i in range(self.shards)]

    def configure(self, bands: int, rows: int) -> None:
        """See :class:`~stream_dedupe.core.sharding.gather.ShardClient`."""
        self._applied = self._all("configure", bands, rows)

    def applied(self) -> list[int]:
        """See :class:`~stream_dedupe.core.sharding.gather.ShardClient`."""
        return list(self._applied)

    def apply(self, number: int, ops: Sequence[ShardOps]) -> None:
        """Send commit ``number`` to every shard; its acknowledgement is read with the next reply."""
        for i, shard_ops in enumerate(ops):
            self._send(i, "apply", number, shard_ops.encode())
            self._pending[i] += 1
            self._applied[i] = number

    def members(self, bands: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, list[str]]:
        """See :class:`~stream_dedupe.core.sharding.gather.ShardClient`."""
        return merge_members(self._all("members", bands, keys))

    def get_many(self, namespace: str, keys: Sequence[bytes]) -> list[bytes | None]:
        """See :class:`~stream_dedupe.core.sharding.gather.ShardClient`."""
        by_shard: list[list[int]] = [[] for _ in range(self.shards)]
        for i, key in enumerate(keys):
            by_shard[owner(key, self.shards)].append(i)
        asked = [s for s in range(self.shards) if by_shard[s]]
        for s in asked:
            self._send(s, "get_many", namespace, [keys[i] for i in by_shard[s]])
        out: list[bytes | None] = [None] * len(keys)
        for s in asked:
            for i, value in zip(by_shard[s], self._recv(s), strict=True):
                out[i] = value
        return out

    def items(self, namespace: str, shard: int) -> Iterator[tuple[bytes, bytes]]:
        """See :class:`~stream_dedupe.core.sharding.gather.ShardClient`."""
        self._token += 1
        token = self._token
        while True:
            self._send(shard, "items", token, namespace)
            chunk = self._recv(shard)
            yield from chunk
            if len(chunk) < _ITEMS_CHUNK:
                return

    def count(self, namespace: str) -> int:
        """See :class:`~stream_dedupe.core.sharding.gather.ShardClient`."""
        return sum(self._all("count", namespace))

    def stats(self, compact: bool = False) -> list[dict[str, int]]:
        """Per shard: documents in its band tables, band-table bytes, disk bytes, process RSS and CPU seconds.

        Args:
            compact: Compact each shard's RocksDB first (the settled size, as after a while).

        """
        return self._all("stats", compact)

    def close(self) -> None:
        """Read every acknowledgement, close the shards' stores and stop their processes."""
        try:
            self._all("close")
        finally:
            for proc in self._procs:
                proc.join(timeout=10)
                if proc.is_alive():
                    proc.kill()


def open_state(path: Path, index_shards: int | None, *, memtable_bloom: bool = True, wal: bool = True) -> KVStore:
    """Open a state directory; a sharded one with its shard processes.

    Args:
        path: The state directory (``--state``).
        index_shards: ``--index-shards``: None to take what the state holds; 1 for the unsharded
            layout; 2 or more for a sharded one (a new state, or one built with that many).
        memtable_bloom: See :class:`~stream_dedupe.storage.rocks.RocksStore`.
        wal: See :class:`~stream_dedupe.storage.rocks.RocksStore`. A sharded state always logs
            its writes: its shards flush on their own, so only the log keeps them consistent.

    Raises:
        ConfigError: if ``index_shards`` does not match the state.

    """
    from stream_dedupe.storage.rocks import RocksStore

    if index_shards is not None and index_shards < 1:
        raise ConfigError(f"--index-shards must be 1 (no shards) or more, got {index_shards}")
    local = RocksStore(path, memtable_bloom=memtable_bloom, wal=wal and (index_shards or 1) == 1)
    try:
        raw = local.get_many("meta", [LAYOUT_KEY])[0]
        stored = None if raw is None else int(raw)
        fresh = local.count("docs") == 0 and raw is None
        if stored is None and (index_shards or 1) == 1:
            return local
        if stored is None and not fresh:
            raise ConfigError(
                f"--state {path} was built without index shards: --index-shards {index_shards} needs a new state "
                "(run the corpus into a new directory with --index-shards)"
            )
        if stored is not None and index_shards is not None and index_shards != stored:
            raise ConfigError(
                f"--state {path} was built with --index-shards {stored}, not {index_shards}: pass "
                f"--index-shards {stored} (or leave it out), or build a new state"
            )
        local.log_writes()
        return ShardedStore(local, ProcessShards(stored or index_shards or 1, path / "shards"))
    except BaseException:
        local.close()
        raise
