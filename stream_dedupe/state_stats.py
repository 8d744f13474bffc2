"""What a state holds, read without deciding anything: ``stream-dedupe stats`` and ``Deduper.stats``.

The clusters and the deduped set are counted as the end of a ``dedupe`` run counts them
(:func:`~stream_dedupe.exports.summarize`: one scan of the document records, one of the
cluster records); ``by_source`` scans the document records once more, and a state that learns
boilerplate has its line counts scanned for the learned lines. The run checkpoint says whether the
last ``dedupe`` into the state finished.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson

from stream_dedupe.config import DedupeParams
from stream_dedupe.exports import summarize
from stream_dedupe.storage.base import KVStore
from stream_dedupe.storage.docrecord import DocRecord
from stream_dedupe.storage.state import StateView

#: Meta keys written by the engine (events so far) and the embedded run loop (its checkpoint).
_SEQ_KEY = b"seq"
_RUN_KEY = b"run"
_BOILERPLATE = "boilerplate"


@dataclass(frozen=True)
class SourceStats:
    """The documents of one ``source`` in a state.

    Attributes:
        documents: Documents of the source.
        representatives: Of those, the ones in the deduped set.
        learned_lines: Lines learned as boilerplate for the source.

    """

    documents: int = 0
    representatives: int = 0
    learned_lines: int = 0

    @property
    def dropped(self) -> int:
        """Documents of the source covered by a representative (out of the deduped set)."""
        return self.documents - self.representatives


@dataclass(frozen=True)
class StateStats:
    """Counts over a whole state.

    Attributes:
        documents: Documents in the state.
        representatives: Documents in the deduped set (every other one is covered by one of them).
        clusters: Clusters, singletons included.
        clusters_with_duplicates: Clusters of two or more documents.
        largest_cluster: Size of the largest cluster.
        largest_cover: Most documents one representative holds (itself included).
        learned_lines: Lines learned as boilerplate (0 when the state does not learn).
        events: Events emitted into the state so far (the last ``seq``).
        unfinished_run: Where an interrupted ``dedupe`` stopped (``{"path", "line"}``), or None
            when the last run finished.
        disk_bytes: Bytes of the state directory on disk (its shards included), or None for a
            state in memory.
        params: The parameters the state was built with (as stored).
        sources: Per ``source`` (``""``: documents without one), when asked for.
        live: True when another process was writing the state: the counts are as it had
            persisted it (every batch up to its last flush), and :attr:`unfinished_run` is where
            that run had got to.

    """

    documents: int
    representatives: int
    clusters: int
    clusters_with_duplicates: int
    largest_cluster: int
    largest_cover: int
    learned_lines: int
    events: int
    unfinished_run: dict[str, Any] | None
    disk_bytes: int | None
    params: dict[str, Any]
    sources: dict[str, SourceStats] | None = field(default=None)
    live: bool = False

    @property
    def dropped(self) -> int:
        """Documents out of the deduped set, each covered by a verified near-duplicate that stays."""
        return self.documents - self.representatives

    @property
    def dropped_rate(self) -> float:
        """:attr:`dropped` over :attr:`documents` (0 for an empty state)."""
        return self.dropped / self.documents if self.documents else 0.0

    def to_json(self) -> dict[str, Any]:
        """The stats as JSON-ready values (``stats --json``): the fields, ``dropped`` and ``dropped_rate``."""
        out = asdict(self)
        out["dropped"] = self.dropped
        out["dropped_rate"] = round(self.dropped_rate, 6)
        if self.sources is not None:
            out["sources"] = {
                name: {**asdict(stats), "dropped": stats.dropped} for name, stats in sorted(self.sources.items())
            }
        return out


def state_stats(
    store: KVStore, params: DedupeParams, path: Path | None = None, by_source: bool = False, live: bool = False
) -> StateStats:
    """Count what ``store`` holds (a committed state; nothing is written).

    Args:
        store: The state.
        params: The parameters it was built with (``stored_params``).
        path: Its directory, for :attr:`StateStats.disk_bytes` (None: not on disk).
        by_source: Also count per ``source`` (decodes every document record).
        live: ``store`` is a reader of a state another process writes (:attr:`StateStats.live`).

    """
    summary = summarize(store)
    per_source: dict[str, list[int]] = {}
    if by_source:
        for _, raw in store.items("docs"):
            record = DocRecord.decode(raw)
            counts = per_source.setdefault(record.source or "", [0, 0, 0])
            counts[0] += 1
            counts[1] += record.covered_by is None
    learned = _learned_lines(store, params, per_source if by_source else None)
    view = StateView(store)
    return StateStats(
        documents=summary.documents,
        representatives=summary.representatives,
        clusters=summary.clusters,
        clusters_with_duplicates=summary.with_duplicates,
        largest_cluster=summary.largest,
        largest_cover=summary.largest_cover,
        learned_lines=learned,
        events=int(view.get_json(_SEQ_KEY) or 0),
        unfinished_run=_unfinished(view.get_json(_RUN_KEY)),
        disk_bytes=None if path is None else _tree_bytes(path),
        params=params.to_state(),
        sources={name: SourceStats(*counts) for name, counts in per_source.items()} if by_source else None,
        live=live,
    )


def _learned_lines(store: KVStore, params: DedupeParams, per_source: dict[str, list[int]] | None) -> int:
    """Lines whose count reached ``min_docs``, as the learner counts them when it opens a state.

    Reads each value's count (its first field) without decoding the carrier list; only a learned
    line, ``[count, source, line]``, is decoded, and only for ``per_source``.
    """
    if not params.boilerplate.learn:
        return 0
    min_docs = params.boilerplate.min_docs
    learned = 0
    for _, raw in store.items(_BOILERPLATE):
        if int(raw[1 : raw.index(b",")]) < min_docs:
            continue
        learned += 1
        if per_source is not None:
            value = orjson.loads(raw)
            source = value[1] if len(value) == 3 and isinstance(value[1], str) else ""
            per_source.setdefault(source, [0, 0, 0])[2] += 1
    return learned


def _unfinished(checkpoint: Any) -> dict[str, Any] | None:
    """Where the interrupted run stopped: the input file's path and the last line committed."""
    if not checkpoint:
        return None
    inputs = checkpoint.get("inputs") or []
    at = int(checkpoint.get("file", 0))
    path = inputs[at].get("path") if at < len(inputs) else None
    return {"path": path, "line": int(checkpoint.get("line", 0))}


def _tree_bytes(path: Path) -> int:
    """Bytes of the files under ``path`` (a sharded state keeps its shards in a subdirectory)."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name)).st_size
            except FileNotFoundError:  # a file RocksDB removed meanwhile
                continue
    return total
