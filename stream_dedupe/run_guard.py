"""What ``dedupe`` checks about the run before it, so that no run's decisions are lost.

An interrupted run leaves a checkpoint in the state (:func:`stream_dedupe.checkpoint.run_checkpoint`):
the inputs it read, the line it committed up to and where its events file ended. Running the same
command again resumes it. A *different* run replaces that checkpoint, and then the interrupted one
can no longer be resumed: running its command again decides its committed documents as
``unchanged`` and rewrites its events file, so the decisions in that file would be lost. Hence:

- a run that would replace a checkpoint that can still be resumed (its inputs are files, as they
  were) is refused unless ``--abandon-unfinished`` is given (:func:`can_still_resume`);
- a run never overwrites the events file of an unfinished run (:func:`overwrite_message`).
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from stream_dedupe.checkpoint import earlier_events, resume_point, rewind_events, run_checkpoint, unfinished_run
from stream_dedupe.consoles import Output
from stream_dedupe.errors import ConfigError
from stream_dedupe.inputs import identity
from stream_dedupe.storage.base import KVStore


def settle(
    store: KVStore,
    state: Path,
    inputs: list[str],
    deletions: Sequence[str],
    events: str | None,
    abandon_unfinished: bool,
    console: Output,
) -> bool:
    """Check a run against the state's unfinished one and prepare the events files; True if it resumes that one.

    A run that resumes cuts the events files back to the state's last batch (this run's, and the
    stopped run's when this one writes elsewhere); one that would replace a resumable run, or
    overwrite the events of one it cannot resume, is refused.

    Raises:
        ConfigError: the run is refused (the message says what to do).

    """
    resuming = resume_point(store, inputs, deletions) is not None
    named = None if events in (None, "-") else Path(str(events))
    if not resuming and named is not None and (unfinished := unfinished_run(store, named)):
        raise ConfigError(overwrite_message(named, unfinished, inputs))
    if not resuming and (replaced := run_checkpoint(store)) is not None:
        if not abandon_unfinished and can_still_resume(replaced):
            raise ConfigError(abandon_message(replaced, state))
        console.print(f"[yellow]warning[/]: {abandoned_note(replaced, named)}")
    if resuming and named is not None and (cut := rewind_events(store, named)):
        console.out(f"{named}: cut {cut:,} bytes of events of batches the state does not hold; deciding them again")
    earlier = earlier_events(store) if resuming and events is not None else None
    if earlier is not None and (named is None or earlier != named.resolve()):
        cut = rewind_events(store, earlier)  # its tail is decided again, into this run's events
        console.print(f"[yellow]note[/]: {resumed_elsewhere_note(earlier, events or '-', cut)}")
    return resuming


def can_still_resume(checkpoint: dict[str, Any]) -> bool:
    """Whether the unfinished run of ``checkpoint`` could still be resumed: its inputs are files, as they were.

    Not when it read standard input, or an input changed or is gone since.
    """
    earlier = checkpoint.get("inputs") or []
    for entry in earlier:
        path = str(entry.get("path"))
        if path == "-" or not os.path.isfile(path):
            return False
        now = identity(path)
        if (now["size"], now["mtime_ns"]) != (entry.get("size"), entry.get("mtime_ns")):
            return False
    return bool(earlier)


def earlier_command(checkpoint: dict[str, Any], state: Path) -> str:
    """The command line that resumes the run of ``checkpoint``."""
    args = ["stream-dedupe", "dedupe"]
    deletions = []
    for entry in checkpoint.get("inputs") or []:
        if entry.get("kind") == "deletions":
            deletions += ["--deletions", str(entry["path"])]
        else:
            args.append(str(entry["path"]))
    args += [*deletions, "--state", str(state)]
    events = (checkpoint.get("events") or {}).get("path")
    if events:
        args += ["--events", str(events)]
    return shlex.join(args)


def _where(checkpoint: dict[str, Any]) -> str:
    earlier = [str(i.get("path")) for i in checkpoint.get("inputs") or []]
    index = int(checkpoint.get("file", 0))
    return f"line {int(checkpoint.get('line', 0)):,} of {earlier[index] if index < len(earlier) else '?'}"


def abandon_message(checkpoint: dict[str, Any], state: Path) -> str:
    """Why a run that would replace a resumable one is refused, and the two ways on."""
    events = (checkpoint.get("events") or {}).get("path")
    kept = f"; its events are in {events}" if events else ""
    return (
        f"the last run into --state {state} did not finish (it committed up to {_where(checkpoint)}{kept}) and can "
        f"still be resumed: finish it first with `{earlier_command(checkpoint, state)}`, or pass "
        "--abandon-unfinished to run this one anyway (that run can then not be resumed: its command run again "
        "decides the documents it committed as `unchanged`, so give it another --events)"
    )


def abandoned_note(checkpoint: dict[str, Any], this_events: Path | None = None) -> str:
    """The warning of a run that replaces an unfinished one (``this_events``: this run's events file)."""
    events = (checkpoint.get("events") or {}).get("path")
    kept = f" Its events stay in {events}; do not let a later run overwrite them." if events else ""
    if events and this_events is not None and str(this_events.resolve()) == events:
        kept = f" This run writes its own events to {events}: keep any copy of that run's you moved away."
    return (
        f"the last run into this state did not finish (it committed up to {_where(checkpoint)}); this run replaces "
        f"its checkpoint, so it can no longer be resumed.{kept}"
    )


def overwrite_message(events: Path, unfinished: dict[str, Any], inputs: list[str]) -> str:
    """Why a run refuses to overwrite the events of an earlier run it cannot resume, and what to do."""
    earlier = [str(i.get("path")) for i in unfinished.get("inputs", [])]
    keep = f"Move {events} away or pass another --events (the state keeps every batch that run committed: its "
    keep += "documents are `unchanged` now)"
    again = ""
    if "-" in earlier or "-" in inputs:
        why = "standard input cannot be read again"
    elif earlier == [os.path.realpath(p) for p in inputs]:
        why = f"{', '.join(earlier)} changed since (size or modification time): a run resumes only the files it read"
    else:
        why = f"this run's inputs are not that run's ({', '.join(earlier)})"
        again = ", or run that run's command again to resume it"
    return (
        f"{events} holds the events of an earlier run into this state that did not finish (it committed up to "
        f"{_where(unfinished)}); this run cannot resume it ({why}) and would overwrite them. {keep}{again}"
    )


def resumed_elsewhere_note(earlier: Path, events: str, cut: int) -> str:
    """A resumed run that writes its events to another file than the run it resumes: where each event is."""
    where = "standard output" if events == "-" else events
    tail = (
        f" ({cut:,} bytes of events of batches the state does not hold were cut from its end: they are decided "
        f"again into {where})"
        if cut
        else ""
    )
    return (
        f"this run resumes an unfinished one whose events are in {earlier}{tail}. Those events stay there: "
        f"{earlier} followed by {where} hold one event for every input line"
    )


def cut_input_message(exc: Exception, events: Path | None) -> str:
    """An input that ends early mid-run: what the state holds, and how to go on once the file is whole."""
    kept = f"; their events are in {events}" if events is not None else ""
    again = f"move {events} away or pass another --events, and " if events is not None else ""
    text = str(exc)
    damaged = ""
    if "CRC" in text or "checksum" in text.lower() or "corrupt" in text.lower():
        # gzip checks a member's checksum at its end: lines of the damaged part were read as they came
        damaged = (
            " The file is damaged, not cut short: some of those lines may have been read damaged (look for "
            "`invalid` events and ids you do not know among them, and delete such ids with --deletions)."
        )
    return (
        f"{text}. The documents before it are decided and committed{kept}.{damaged} Once the file is whole, "
        f"{again}run the command again: the documents committed come out `unchanged` and the rest are decided (a "
        "whole copy under another name: pass --abandon-unfinished, as the run over this file could still resume)"
    )
