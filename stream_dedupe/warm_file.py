"""The warm-start file of a state directory: the engine's in-memory indexes, saved when a run ends.

``dedupe`` writes ``warm-start.npz`` into the state directory after its last commit
(:func:`save`), with the state's fingerprint (:meth:`~stream_dedupe.storage.rocks.RocksStore.fingerprint`:
RocksDB's database id and last sequence number); the next command over that directory loads it
(:func:`load`) only if the fingerprint is still the same, that is if nothing was written in
between (another command, a crash, an older copy of the state). Otherwise, or when the file is
missing or unreadable, the engine rebuilds its indexes from the state as before: the file only
ever saves time, the decisions are the same either way (``tests/test_warm_start.py``).

The file holds the LSH band tables as they are in memory (8 bytes a slot per band, at least two
slots an indexed document: ~0.5 KB a document with the default 18 bands), the indexed ids and
the boilerplate key filter; it is replaced atomically and can be deleted at any time.
"""

from __future__ import annotations

import logging
import os
import zipfile
from typing import Any

import numpy as np

from stream_dedupe.storage.base import KVStore
from stream_dedupe.storage.rocks import RocksStore

log = logging.getLogger("stream_dedupe.warm_file")
FILE_NAME = "warm-start.npz"
#: States with fewer documents are not saved: their indexes are rebuilt in less time than the
#: file takes to write and read (measured: BENCHMARKS.md, "Reopening a state").
MIN_DOCUMENTS = 10_000


def load(store: KVStore) -> dict[str, np.ndarray] | None:
    """The arrays saved for exactly this state, or None (another state, a write since, no file)."""
    if not isinstance(store, RocksStore):
        return None
    path = store.path / FILE_NAME
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as saved:
            if str(saved["fingerprint"]) != store.fingerprint():
                return None
            return {name: saved[name] for name in saved.files if name != "fingerprint"}
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
        log.warning("ignoring the warm-start file %s (%s): the state is read instead", path, exc)
        return None


def save(store: KVStore, engine: Any) -> bool:
    """Save the engine's indexes for the next command over this state; right after its last commit.

    Returns:
        True if the file was written (a RocksDB state whose indexes can be saved).

    """
    if not isinstance(store, RocksStore):
        return False
    path = store.path / FILE_NAME
    if store.count("docs") < MIN_DOCUMENTS:
        path.unlink(missing_ok=True)  # of a state since made smaller: it would not fit anyway
        return False
    arrays = engine.warm_arrays()
    if arrays is None:
        return False
    part = path.with_name(FILE_NAME + ".part")
    try:
        with open(part, "wb") as out:
            np.savez(out, fingerprint=np.array(store.fingerprint()), **arrays)
        os.replace(part, path)
    except OSError as exc:
        log.warning("could not write the warm-start file %s (%s): the next run reads the state", path, exc)
        part.unlink(missing_ok=True)
        return False
    return True


def discard(store: KVStore) -> None:
    """Remove the state's warm-start file, if any (``dedupe --no-warm-start``)."""
    if isinstance(store, RocksStore):
        (store.path / FILE_NAME).unlink(missing_ok=True)
