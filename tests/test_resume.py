"""Resuming an interrupted ``dedupe``: which runs may skip RocksDB's log, and cutting the events file back."""

from __future__ import annotations

import os
from pathlib import Path

import orjson

from stream_dedupe.checkpoint import can_redo, rewind_events
from stream_dedupe.storage.rocks import RocksStore


def test_only_a_run_over_files_with_events_in_a_regular_file_or_none_can_redo_lost_batches(tmp_path: Path) -> None:
    events = tmp_path / "ev.jsonl"
    assert can_redo(["in.jsonl"], [], None)
    assert can_redo(["in.jsonl"], ["gone.txt"], str(events))  # not there yet: a regular file once opened
    events.write_bytes(b"")
    assert can_redo(["in.jsonl"], [], str(events))
    assert not can_redo(["-"], [], None)  # standard input cannot be read again
    assert not can_redo(["in.jsonl"], ["-"], None)
    assert not can_redo(["in.jsonl"], [], "-")  # standard output cannot be cut back
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    assert not can_redo(["in.jsonl"], [], str(fifo))


def _store_with_checkpoint(tmp_path: Path, mark: dict[str, object] | None) -> RocksStore:
    store = RocksStore(tmp_path / "state")
    store.write({"meta": {b"run": orjson.dumps({"inputs": [], "file": 0, "line": 64, "counters": {}, "events": mark})}})
    return store


def test_rewind_cuts_the_events_of_batches_the_state_does_not_have(tmp_path: Path) -> None:
    events = tmp_path / "ev.jsonl"
    events.write_bytes(b'{"committed":1}\n{"not committed":2}\n')
    store = _store_with_checkpoint(tmp_path, {"path": str(events.resolve()), "bytes": 16})
    assert rewind_events(store, events) == 20
    assert events.read_bytes() == b'{"committed":1}\n'
    assert rewind_events(store, events) == 0  # already there
    store.close()


def test_rewind_leaves_any_other_file_as_it_is(tmp_path: Path) -> None:
    other, shorter = tmp_path / "other.jsonl", tmp_path / "ev.jsonl"
    other.write_bytes(b"x" * 100)
    shorter.write_bytes(b"y" * 10)
    store = _store_with_checkpoint(tmp_path, {"path": str(shorter.resolve()), "bytes": 16})
    assert rewind_events(store, other) == 0  # not the file the checkpoint names
    assert rewind_events(store, shorter) == 0  # shorter than it was: not what the run wrote
    assert other.read_bytes() == b"x" * 100 and shorter.read_bytes() == b"y" * 10
    store.close()
    old = _store_with_checkpoint(tmp_path / "old", None)  # a checkpoint of an older version, or no events file
    assert rewind_events(old, other) == 0 and other.read_bytes() == b"x" * 100
    old.close()
