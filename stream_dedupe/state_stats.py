"""What a state holds, read without deciding anything: ``stream-dedupe stats`` and ``Deduper.stats``.

The clusters and the deduped set are counted as the end of a ``dedupe`` run counts them
(:func:`~stream_dedupe.exports.summarize`: one scan of the document records, one of the
cluster records); ``by_source`` scans the document records once more, and a state that learns
boilerplate has its line counts scanned for the learned lines (those ``stream-dedupe
boilerplate`` lists). The run checkpoint says whether the
last ``dedupe`` into the state finished.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from stream_dedupe.checkpoint import run_checkpoint
from stream_dedupe.config import DedupeParams
from stream_dedupe.core.boilerplate import learned_lines
from stream_dedupe.core.engine import stored_seq
from stream_dedupe.exports import summarize
from stream_dedupe.storage.base import KVStore
from stream_dedupe.storage.docrecord import DocRecord
from stream_dedupe.storage.rocks import tree_bytes
from stream_dedupe.storage.state import StateView


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
        index_shards: Index shards of the state (``--index-shards``; 1: not sharded).
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
    index_shards: int = 1
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
    learned = 0
    if params.boilerplate.learn:  # the lines `stream-dedupe boilerplate` lists
        for source, _, _ in learned_lines(StateView(store), params.boilerplate.min_docs):
            learned += 1
            if by_source:
                per_source.setdefault(source, [0, 0, 0])[2] += 1
    return StateStats(
        documents=summary.documents,
        representatives=summary.representatives,
        clusters=summary.clusters,
        clusters_with_duplicates=summary.with_duplicates,
        largest_cluster=summary.largest,
        largest_cover=summary.largest_cover,
        learned_lines=learned,
        events=stored_seq(store),
        unfinished_run=_unfinished(run_checkpoint(store)),
        disk_bytes=None if path is None else tree_bytes(path),
        params=params.to_state(),
        index_shards=_index_shards(store),
        sources={name: SourceStats(*counts) for name, counts in per_source.items()} if by_source else None,
        live=live,
    )


def _index_shards(store: KVStore) -> int:
    """The state's ``--index-shards`` (stored when it was built sharded; 1 otherwise)."""
    from stream_dedupe.core.sharding.gather import LAYOUT_KEY

    raw = store.get_many("meta", [LAYOUT_KEY])[0]
    return 1 if raw is None else int(raw)


def _unfinished(checkpoint: dict[str, Any] | None) -> dict[str, Any] | None:
    """Where the interrupted run stopped: the input file's path and the last line committed."""
    if not checkpoint:
        return None
    inputs = checkpoint.get("inputs") or []
    at = int(checkpoint.get("file", 0))
    path = inputs[at].get("path") if at < len(inputs) else None
    return {"path": path, "line": int(checkpoint.get("line", 0))}
