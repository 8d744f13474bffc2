"""Helpers of the command line: a quiet end on a closed stdout, checks made before anything is created."""

from __future__ import annotations

import errno
import gc
import inspect
import os
import sys
from collections import Counter
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import IO, Any

import typer
from typer.core import TyperGroup

from stream_dedupe.config import DedupeParams
from stream_dedupe.errors import ConfigError, StateInUseError

#: Exit code of a ``dedupe`` whose standard output (``--events -``) was closed before the input's
#: end: what a shell reports for a command a closed pipe ends (128 + SIGPIPE).
EXIT_CUT_SHORT = 141


def unwrapped(text: str) -> str:
    r"""A docstring's paragraphs each on one line, for a terminal to wrap at its own width.

    Typer 0.2x prints the line breaks of a command's docstring after its first paragraph as they
    are, so a paragraph wrapped at 100 columns in the source came out ragged in an 80-column
    terminal. Paragraphs marked ``\b`` (click's "do not rewrap") are kept as they are.
    """
    paragraphs = inspect.cleandoc(text).split("\n\n")
    return "\n\n".join(p if p.startswith("\b") else " ".join(p.split("\n")) for p in paragraphs)


class Commands(TyperGroup):
    """The command group: a closed stdout (``| head -1``) ends a command quietly, with exit 0.

    Its commands' help is :func:`unwrapped`.
    """

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        """The command named ``cmd_name``, its help's paragraphs unwrapped."""
        command = super().get_command(ctx, cmd_name)
        if command is not None and command.help:
            command.help = unwrapped(command.help)
        return command

    def invoke(self, ctx: Any) -> Any:  # typer's (vendored) click Context
        """Run the command; on EPIPE from stdout, silence it and exit 0."""
        try:
            result = super().invoke(ctx)
            sys.stdout.flush()  # buffered text output meets a closed pipe here, not at exit
            return result
        except OSError as exc:
            if exc.errno != errno.EPIPE:
                raise
            silence_stdout()
            raise typer.Exit(0) from None


def silence_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's final flush does not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def start_up_without_gc() -> None:
    """Collect no garbage while the command starts (imports, option parsing, opening the state).

    Start-up allocates ~37,000 long-lived objects the collector tracks (modules, functions,
    classes) and almost no garbage, yet the collector scans them again and again: ~13% of a
    one-line ``dedupe`` with the final collection at exit (BENCHMARKS.md, "Start-up").
    :func:`gc_from_here` turns collection back on for the work.
    """
    gc.disable()


def gc_from_here() -> None:
    """Collect garbage again, never scanning what start-up allocated (frozen: ``gc.freeze``).

    Call it before the work allocates documents, and before forking worker processes, which
    then inherit a collector that is on (and, frozen, share the start-up's memory pages).
    """
    if not gc.isenabled():
        gc.freeze()
        gc.enable()


def check_outputs(*, reads: Sequence[str] = (), **paths: str | None) -> None:
    """Fail before anything is created when an output file cannot be written, or would clobber an input.

    Args:
        reads: The command's input files: an output that is one of them is refused (writing it
            would truncate the input before it is read).
        **paths: Each output flag (without ``--``) and its path; None: not given, ``-``: stdout.

    Raises:
        ConfigError: an output's directory is missing or not writable, an output is a directory,
            is one of the inputs or another output, or two outputs are standard output.

    """
    given = {flag: path for flag, path in paths.items() if path is not None}
    to_stdout = [f"--{flag} -" for flag, path in given.items() if path == "-"]
    if len(to_stdout) > 1:
        raise ConfigError(f"{' and '.join(to_stdout)} both write to standard output: write one of them to a file")
    seen: dict[str, str] = {}
    inputs = {os.path.realpath(p): p for p in reads if p != "-"}
    for flag, path in given.items():
        if path == "-":
            continue
        target = Path(path)
        if target.is_dir():
            raise ConfigError(f"--{flag} {path} is a directory: give a file name (e.g. {target / (flag + '.jsonl')})")
        parent = target.resolve().parent
        if not parent.is_dir() or not os.access(parent, os.W_OK):
            raise ConfigError(f"--{flag} {path}: directory {parent} does not exist or is not writable")
        real = os.path.realpath(path)
        if real in inputs:
            raise ConfigError(
                f"--{flag} {path} is the input {inputs[real]}: writing it would destroy the input; give another file"
            )
        if real in seen:
            raise ConfigError(f"--{flag} and --{seen[real]} are the same file {path}: give each its own")
        seen[real] = flag


def is_state(state: Path) -> bool:
    """Whether ``state`` is a RocksDB directory (a state written by ``dedupe``)."""
    return (state / "CURRENT").exists()


def check_new_state_dir(state: Path, flag: str = "--state") -> None:
    """A directory about to become a state: missing, or empty (``flag`` names it in the message)."""
    if state.exists() and (not state.is_dir() or any(state.iterdir())):
        what = (
            "is a stream-dedupe state already"
            if is_state(state)
            else "exists and is not a stream-dedupe state directory"
        )
        raise ConfigError(f"{flag} {state} {what}: give a new or empty directory (it is created if missing)")


def open_existing(state: Path) -> tuple[Any, DedupeParams]:
    """Open a state for a read-only command: it must exist and hold the parameters of a run."""
    from stream_dedupe.core.engine import stored_params
    from stream_dedupe.sharded_state import open_state
    from stream_dedupe.storage.worker_tables import is_worker_state

    hint = f"run `stream-dedupe dedupe FILE.jsonl --state {state}` first"
    if not is_state(state):
        if is_worker_state(state):
            raise ConfigError(
                f"--state {state} is a Kafka worker's state directory: this command changes a state, and a "
                "worker's belongs to the worker (stats, clusters, boilerplate and explain --state read it)"
            )
        what = "does not exist" if not state.exists() else "is not a stream-dedupe state directory"
        raise ConfigError(f"--state {state} {what}: {hint}")
    try:
        store = open_state(state, None)  # a sharded state with its shard processes
    except StateInUseError as exc:  # a reader should wait, not stop the writer
        raise StateInUseError(
            f"--state {state} is in use by another stream-dedupe process (a `dedupe` still running, or a "
            "Python Deduper open): a state has one user at a time; run this command again once it has finished"
        ) from exc
    params = stored_params(store)
    if params is None:
        store.close()
        raise ConfigError(
            f"--state {state} is empty (no run has committed to it; an earlier run may have stopped "
            f"on an error): {hint}, or delete the directory"
        )
    return store, params


def open_for_reading(state: Path) -> tuple[Any, DedupeParams, bool]:
    """Open a state for a command that only reads it, also while another process holds it.

    Returns:
        ``(store, params, live)``: ``live`` is True when a running ``dedupe`` (or an open Python
        ``Deduper``) holds the state, and for a Kafka worker's state directory (read through
        :class:`~stream_dedupe.storage.worker_tables.WorkerTablesStore`, the worker running or
        not); it is then read without its lock (a RocksDB secondary instance) as that process
        had persisted it, up to its last flush: a batch boundary. Only
        the state's own directory is opened then: a sharded state's shards (signatures, shingle
        sets, bands) are not.

    Raises:
        ConfigError: as :func:`open_existing`.
        StateInUseError: the process holding the state has not written a batch to disk yet.

    """
    from stream_dedupe.core.engine import stored_params
    from stream_dedupe.storage.rocks import RocksStore
    from stream_dedupe.storage.worker_tables import WorkerTablesStore, is_worker_state

    if not is_state(state) and is_worker_state(state):
        tables = WorkerTablesStore(state)
        params = stored_params(tables)
        if params is None:
            tables.close()
            raise StateInUseError(
                f"--state {state} is a Kafka worker's state with no batch decided yet: run again later"
            )
        return tables, params, True
    try:
        store, params = open_existing(state)
        return store, params, False
    except StateInUseError:
        pass
    store = RocksStore(state, reader=True)
    stored = stored_params(store)
    if stored is None:
        store.close()
        raise StateInUseError(
            f"--state {state} is in use by another stream-dedupe process that has not written a batch to disk "
            "yet: run this command again in a while"
        )
    return store, stored, True


def open_out(stack: ExitStack, path: str | None, mode: str) -> IO[bytes] | None:
    """An output file opened on ``stack`` (``-``: standard output; None: no output)."""
    if path is None:
        return None
    if path == "-":
        return sys.stdout.buffer
    return stack.enter_context(open(path, mode))


def invalid_summary(counters: Counter[str], first: dict[str, Any] | None, events: str | None) -> str:
    """How many records were invalid, for which reasons, and where the first one is."""
    reasons = sorted(
        ((k.split(":", 1)[1], n) for k, n in counters.items() if k.startswith("invalid:")), key=lambda r: -r[1]
    )
    text = f"{counters['invalid']:,} invalid record(s)"
    if reasons:
        text += " (" + ", ".join(f"{reason} {n:,}" for reason, n in reasons) + ")"
    if first is not None:
        where = f"{first.get('file')}:{first.get('line')}" if first.get("line") is not None else "?"
        text += f"; the first at {where}: {first.get('detail')}"
    where_all = f"every one is an `invalid` event in {events}" if events else "pass --events FILE to list them all"
    return f"{text}; {where_all}."


def directory_bytes(path: Path) -> int:
    """Bytes of the files directly in ``path`` (a RocksDB directory has no subdirectories), 0 if missing."""
    try:
        return sum(entry.stat().st_size for entry in os.scandir(path) if entry.is_file())
    except OSError:  # missing, or not a directory: the state open says why
        return 0


def small_run(inputs: list[str], input_bytes: int | None, limit: int) -> bool:
    """Whether a run is known to write little: uncompressed files (not stdin) under ``limit`` bytes."""
    from stream_dedupe.inputs import is_compressed

    return input_bytes is not None and input_bytes < limit and not any(is_compressed(p) for p in inputs)


#: Thread-count variables OpenBLAS reads when it loads (the first ``import numpy``).
BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")


def one_blas_thread() -> None:
    """Let numpy's OpenBLAS start no thread of its own, unless the user chose a thread count.

    OpenBLAS starts a thread per core when numpy is imported, and those threads spin waiting for
    work: ~0.07 s of CPU for every run on this project's 2-core machine (BENCHMARKS.md,
    "Start-up"), for nothing, since no command multiplies matrices (the kernels are element-wise).
    Called before anything imports numpy; this module does not import it. The worker processes of
    ``--jobs`` and the Kafka worker inherit the setting.
    """
    if not set(BLAS_THREAD_VARIABLES) & os.environ.keys():
        os.environ["OPENBLAS_NUM_THREADS"] = "1"
