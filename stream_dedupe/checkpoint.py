"""The checkpoint an embedded run keeps in its state, and what a later run reads from it.

:mod:`stream_dedupe.embedded` commits a checkpoint with every batch (the inputs' identities, the
file and line reached, the counters, where the events file ended) and clears it at the end. A
later run over the same inputs resumes there (:func:`resume_point`) after cutting the events of
batches written but not committed (:func:`rewind_events`); :mod:`stream_dedupe.run_guard` uses
the rest to refuse a run that would lose an unfinished one's decisions.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import orjson

from stream_dedupe.inputs import identity
from stream_dedupe.storage.base import KVStore
from stream_dedupe.storage.state import StateView

#: The state's ``meta`` key of the unfinished run's checkpoint.
RUN_KEY = b"run"


def checkpoint(
    inputs: list[dict[str, Any]], file_index: int, line: int, counters: Counter[str], events: dict[str, Any] | None
) -> bytes:
    """The checkpoint of a run after a batch, as stored under :data:`RUN_KEY` (see :func:`run_checkpoint`)."""
    return orjson.dumps(
        {"inputs": inputs, "file": file_index, "line": line, "counters": dict(counters), "events": events}
    )


def events_mark(out: IO[bytes] | None, path: Path | None) -> dict[str, Any] | None:
    """Where the events file ends now (its path and size), for the checkpoint; None for no file."""
    if out is None or path is None:
        return None
    return {"path": str(path), "bytes": out.tell()}


def rewind_events(store: KVStore, events: Path) -> int:
    """Cut ``events`` back to where it ended at the last committed batch; returns the bytes cut.

    The events of a batch are written before the batch is committed, so after a kill the file
    may end with events of batches the state does not have (with ``RocksStore(wal=False)``,
    every batch since the last flush). The resumed run decides them again, identically; cutting
    them first leaves each event in the file once. The file is left as it is unless it is the
    one the checkpoint names and is at least as long as it was then.
    """
    _, mark = _unfinished_events(store)
    if mark is None or mark["path"] != str(events.resolve()) or not events.is_file():
        return 0
    size, keep = events.stat().st_size, int(mark["bytes"])
    if size <= keep:
        return 0
    with open(events, "r+b") as out:
        out.truncate(keep)
    return size - keep


def earlier_events(store: KVStore) -> Path | None:
    """The events file of the unfinished run of ``store`` (from its checkpoint), or None."""
    _, mark = _unfinished_events(store)
    return None if mark is None else Path(mark["path"])


def unfinished_run(store: KVStore, events: Path) -> dict[str, Any] | None:
    """The checkpoint of an earlier run that did not finish and whose events are in ``events``, or None.

    Such a file holds decisions the state will not give again (its documents are known now:
    deciding them again says ``unchanged``), so a run that cannot resume that one must not
    overwrite it. None when the file is missing or empty, or names another run.
    """
    previous, mark = _unfinished_events(store)
    if mark is None or mark["path"] != str(events.resolve()) or not events.is_file():
        return None
    return previous if events.stat().st_size else None


def _unfinished_events(store: KVStore) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The unfinished run's checkpoint, and where its events file ended (None: no checkpoint, or no file)."""
    previous = run_checkpoint(store)
    mark = previous.get("events") if previous else None
    return previous, (mark if mark and mark.get("path") else None)


def identities(paths: list[str], deletion_paths: Sequence[str]) -> list[dict[str, Any]]:
    """The identity of each input of a run (its files, then its deletion files), as the checkpoint keeps them."""
    return [identity(p) for p in paths] + [{**identity(p), "kind": "deletions"} for p in deletion_paths]


def can_redo(paths: Sequence[str], deletion_paths: Sequence[str], events: str | None) -> bool:
    """True if the batches a kill loses can be decided again on resume, each event still once.

    The inputs must be files (a resumed run reads them again) and the events a regular file
    (:func:`rewind_events` cuts it back) or none. Such a run may write its state without the
    write-ahead log (:class:`~stream_dedupe.storage.rocks.RocksStore` ``wal=False``).
    """
    if "-" in paths or "-" in deletion_paths or events == "-":
        return False
    return events is None or not Path(events).exists() or Path(events).is_file()


def run_checkpoint(store: KVStore) -> dict[str, Any] | None:
    """The checkpoint of the last run into ``store`` while it is unfinished (None once a run finished).

    ``{"inputs": [identity of each input], "file": index, "line": lines committed, "counters",
    "events": where the events file ended}``.
    """
    checkpoint = StateView(store).get_json(RUN_KEY)
    return dict(checkpoint) if checkpoint else None


def resume_point(store: KVStore, paths: list[str], deletion_paths: Sequence[str] = ()) -> tuple[int, int] | None:
    """``(file index, line)`` where an interrupted run over the same inputs stopped, or None."""
    if "-" in paths or "-" in deletion_paths:
        return None
    previous = run_checkpoint(store)
    if previous and previous.get("inputs") == identities(paths, deletion_paths):
        return int(previous["file"]), int(previous["line"])
    return None
