"""Refilling the in-memory band tables from the stored signatures when a state is opened."""

from __future__ import annotations

import numpy as np

from stream_dedupe.core import jit
from stream_dedupe.core.lshindex import LshIndex
from stream_dedupe.storage.base import KVStore
from stream_dedupe.storage.state import SKIPPED_BANDS_KEPT, DocRecord, skipped_bands_of

#: Signatures from which a rebuild of the band tables enables the compiled kernels: the pure
#: insert takes ~70 us a document, so numba's ~0.7 s start repays itself from about here.
REBUILD_COMPILED_DOCS = 8192


def rebuild_index(store: KVStore, lsh: LshIndex) -> None:
    """Fill ``lsh`` with the bands of every indexed document in the state (start-up, recovery).

    A state that keeps its documents' skipped bands (:data:`~stream_dedupe.storage.state.SKIPPED_BANDS_KEPT`,
    every state created since) gets the live tables exactly: each document in the bands it joined
    when it arrived. An older one is rebuilt capped in id order, as before: a full bucket may then
    hold other members than the running engine's did (README, "Clusters bigger than the LSH bucket cap").
    """
    documents = store.count("sigs")
    if documents >= REBUILD_COMPILED_DOCS:
        jit.enable()  # even in a process held pure (a small input over a state whose warm start failed)
    lsh.reserve(documents)
    skipped: dict[bytes, np.ndarray] | None = None
    if store.get_many("meta", [SKIPPED_BANDS_KEPT])[0] is not None:
        skipped = skipped_bands_of(store, lsh.tables.bands)
    chunk: list[tuple[bytes, bytes]] = []
    for item in store.items("sigs"):
        chunk.append(item)
        if len(chunk) == 4096:
            _index_chunk(store, lsh, chunk, skipped)
            chunk = []
    _index_chunk(store, lsh, chunk, skipped)


def _index_chunk(
    store: KVStore, lsh: LshIndex, chunk: list[tuple[bytes, bytes]], skipped: dict[bytes, np.ndarray] | None
) -> None:
    if not chunk:
        return
    records = store.get_many("docs", [k for k, _ in chunk])
    indexed = [(k, v) for (k, v), r in zip(chunk, records, strict=True) if r and DocRecord.indexed_of(r)]
    if not indexed:
        return
    sigs = np.frombuffer(b"".join(v for _, v in indexed), dtype="<u4").reshape(len(indexed), -1)
    ids = [key.decode("utf-8") for key, _ in indexed]
    if skipped is None:
        lsh.add_all(ids, lsh.hashes(sigs))
        return
    masks = np.zeros((len(indexed), lsh.tables.bands), dtype=np.uint8)
    for row, (key, _) in enumerate(indexed):
        mask = skipped.get(key)
        if mask is not None:
            masks[row] = mask
    lsh.add_all_masked(ids, lsh.hashes(sigs), masks)
