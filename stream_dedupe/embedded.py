"""The embedded run: JSONL files in, events and canonical documents out, RocksDB state on disk.

A thin shell over :class:`~stream_dedupe.core.engine.DedupeEngine`: it reads lines, hands
batches to the engine, writes events, and commits the state with a checkpoint after each batch.
SIGINT/SIGTERM finish the current batch and stop cleanly; running the same command again
resumes after the last committed batch, so nothing is decided or counted twice. The checkpoint
also records where the events file ended, so a resumed run first cuts the events of batches that
were written but not committed (:func:`~stream_dedupe.checkpoint.rewind_events`): the file holds each event once, even
after a kill.
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from types import FrameType
from typing import IO, TYPE_CHECKING

import orjson

from stream_dedupe.checkpoint import RUN_KEY, checkpoint, events_mark, identities, resume_point, run_checkpoint
from stream_dedupe.core.engine import DedupeEngine
from stream_dedupe.core.events import Event
from stream_dedupe.core.linepack import unpack_lines
from stream_dedupe.core.records import Deletion, Document, Invalid, Record, parse_line
from stream_dedupe.core.signedpack import unpack_signed
from stream_dedupe.inputs import InputLine, InputReadError, read_lines

if TYPE_CHECKING:
    from concurrent.futures import Future

    from stream_dedupe.core.boilerplate import TextLines
    from stream_dedupe.core.signer import Signed
    from stream_dedupe.sign_pool import PreparedLines, SignPool

#: Called after each batch with (lines consumed so far, bytes position, counters).
ProgressHook = Callable[[int, int, Counter[str]], None]


@dataclass
class RunResult:
    """What an embedded run did.

    Attributes:
        counters: Document outcomes of this run (resumed runs include the interrupted part).
        lines: Input lines consumed.
        seconds: Wall time of this invocation.
        interrupted: True when a signal stopped the run before the end of the input.
        resumed_from: Lines skipped because an earlier interrupted run had committed them.
        first_invalid: The first ``invalid`` event of this invocation (its reason, detail and
            where it came from), or None.

    """

    counters: Counter[str] = field(default_factory=Counter)
    lines: int = 0
    seconds: float = 0.0
    interrupted: bool = False
    resumed_from: int = 0
    first_invalid: Event | None = None


class _StopFlag:
    def __init__(self) -> None:
        self.stop = False

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.stop = True


@contextmanager
def _graceful_signals() -> Iterator[_StopFlag]:
    flag = _StopFlag()
    previous = {sig: signal.signal(sig, flag) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield flag
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run(
    engine: DedupeEngine,
    paths: list[str],
    events_out: IO[bytes] | None,
    batch_size: int,
    max_doc_bytes: int,
    progress: ProgressHook | None = None,
    deletion_paths: Sequence[str] = (),
    pool: SignPool | None = None,
    events_path: Path | None = None,
) -> RunResult:
    """Dedupe ``paths`` into the engine's state, writing one event line per event to ``events_out``.

    Args:
        engine: The engine (its state decides what is already known).
        paths: Input files (plain or gzip JSONL), or ``-`` for standard input.
        deletion_paths: Files of ids to delete, one per line (a bare id, or a JSON object with an
            ``id``), processed after ``paths``.
        events_out: Where to write events as JSON lines (None: do not write them).
        batch_size: Records per engine batch (and per atomic commit).
        max_doc_bytes: Records above this size are ``invalid`` (``too-large``).
        progress: Called after each committed batch.
        pool: Worker processes that sign the documents (``--jobs``); None signs in this process.
            The events are the same either way.
        events_path: The file ``events_out`` writes (a regular file, not standard output): the
            checkpoint records where it ends after each batch, for :func:`rewind_events`.

    Returns:
        What was done.

    """
    inputs = identities(paths, deletion_paths)
    sources = [(p, False) for p in paths] + [(p, True) for p in deletion_paths]
    resumable = "-" not in paths and "-" not in deletion_paths
    events_file = events_path.resolve() if events_path is not None else None
    result = RunResult()
    start_file, start_line = resume_point(engine.store, paths, deletion_paths) or (0, 0)
    if (start_file, start_line) != (0, 0):
        result.counters.update((run_checkpoint(engine.store) or {}).get("counters", {}))
        result.resumed_from = start_line
    started = time.perf_counter()
    # progress counts the bytes of every input file (compressed ones as stored), not of deletions
    sizes = [os.path.getsize(path) if path != "-" else 0 for path in paths]
    with _graceful_signals() as flag:
        for file_index in range(start_file, len(sources)):
            skip = start_line if file_index == start_file else 0
            path, deletions = sources[file_index]
            before = sum(sizes[:file_index])
            lines = read_lines(path, skip)
            if pool is not None and not deletions:
                batches = _prepared_elsewhere(engine, pool, lines, batch_size, max_doc_bytes)
            else:
                batches = _batches(lines, batch_size, max_doc_bytes, deletions)
            consumed = skip
            for batch, records, signed, text_lines in batches:
                origins = [{"file": item.source, "line": item.line} for item in batch]
                events = engine.process(records, origins, signed, text_lines)
                _write(events_out, events)
                for event in events:
                    result.counters[event["event"]] += 1
                    if event.get("exact"):
                        result.counters["exact-duplicate"] += 1
                    if event["event"] == "invalid":
                        result.counters[f"invalid:{event['reason']}"] += 1
                        if result.first_invalid is None:
                            result.first_invalid = event
                consumed = batch[-1].line
                result.lines += len(batch)
                mark = events_mark(events_out, events_file)
                # standard input cannot be read again: its checkpoint only says that a run is unfinished
                engine.commit({RUN_KEY: checkpoint(inputs, file_index, consumed, result.counters, mark)})
                if progress:
                    progress(len(batch), before + (0 if deletions else batch[-1].position), result.counters)
                if flag.stop:
                    result.interrupted = True
                    result.seconds = time.perf_counter() - started
                    return result
            if progress and not deletions and path != "-":
                progress(0, before + sizes[file_index], result.counters)  # a gzip file's last lines too
            if resumable:
                mark = events_mark(events_out, events_file)
                engine.commit({RUN_KEY: checkpoint(inputs, file_index + 1, 0, result.counters, mark)})
        engine.commit({RUN_KEY: None})
    result.seconds = time.perf_counter() - started
    return result


#: A batch of input lines, their records, and (when a worker process prepared them) their
#: signatures and boilerplate lines.
_Batch = tuple[list[InputLine], list[Record], list["Signed | None"] | None, list["TextLines | None"] | None]


def _batches(lines: Iterator[InputLine], n: int, max_doc_bytes: int, deletions: bool) -> Iterator[_Batch]:
    for batch in _chunks(lines, n):
        yield batch, _records(batch, max_doc_bytes, deletions), None, None


def _records(batch: list[InputLine], max_doc_bytes: int, deletions: bool = False) -> list[Record]:
    """The records of a batch parsed in this process."""
    if deletions:
        return [_deletion(item.raw) for item in batch]
    return [parse_line(item.raw, max_doc_bytes) for item in batch]


def _chunks(lines: Iterator[InputLine], n: int) -> Iterator[list[InputLine]]:
    """Batches of ``n`` lines; an input that cannot be read to its end yields its last whole lines first.

    So every line read is decided and committed before the :class:`InputReadError` stops the run.
    """
    while True:
        batch: list[InputLine] = []
        try:
            batch.extend(islice(lines, n))
        except InputReadError:
            if batch:
                yield batch
            raise
        if not batch:
            return
        yield batch


#: Share of a batch's documents recognized as unchanged re-crawls from which the next batches are
#: prepared in this process rather than by the signing pool (:func:`_prepared_elsewhere`).
RECRAWL_SHARE = 0.5


def _prepared_elsewhere(
    engine: DedupeEngine, pool: SignPool, lines: Iterator[InputLine], n: int, max_doc_bytes: int
) -> Iterator[_Batch]:
    """The batches, in order, each parsed, signed and split into boilerplate lines by the pool.

    While this process decides batch ``k``, the workers prepare the next ones (``pool.workers``
    batches read ahead): this process only decides. A batch that no worker could take in time (a
    worker is still busy, or descheduled on a loaded machine) is parsed here and signed by the
    engine instead, so a slow worker never stalls the decisions for more than one batch.

    Nor are batches sent to the pool while the input is mostly unchanged re-crawls (at least
    :data:`RECRAWL_SHARE` of the last batch's documents recognized by their fingerprints): the
    engine reads none of those texts, while the pool would sign them all (parsed here, a re-crawl
    pass runs about as fast as with ``--jobs 1``, 1.5x faster than through the pool). A batch
    with fewer goes to the pool again.
    """
    ahead: deque[_Ahead] = deque()
    source = _chunks(lines, n)
    seen = (engine.counters["documents"], engine.counters["recognized_unchanged"])
    unreadable: InputReadError | None = None  # raised once the batches read before it are decided
    while True:
        while len(ahead) <= pool.workers and unreadable is None:
            try:
                batch = next(source, None)
            except InputReadError as exc:
                unreadable = exc
                break
            if batch is None:
                break
            ahead.append(_Ahead(batch))
        if not ahead:
            if unreadable is not None:
                raise unreadable
            return
        front = ahead.popleft()
        now = (engine.counters["documents"], engine.counters["recognized_unchanged"])
        decided, recognized = now[0] - seen[0], now[1] - seen[1]
        seen = now
        recrawl = decided > 0 and recognized >= RECRAWL_SHARE * decided
        busy = sum(1 for a in ahead if a.future is not None and not a.future.done())
        for later in ahead:
            if busy >= pool.workers or recrawl:
                break
            if later.future is None:
                raws = [item.raw if len(item.raw) <= max_doc_bytes else None for item in later.batch]
                later.future = pool.submit_lines(engine.params, raws, max_doc_bytes)
                busy += 1
        if front.future is None:  # parsed here, signed by the engine
            yield front.batch, _records(front.batch, max_doc_bytes), None, None
            continue
        yield _unpacked(engine, front.batch, pool.outcome(front.future), max_doc_bytes)


def _unpacked(engine: DedupeEngine, batch: list[InputLine], prepared: PreparedLines, max_doc_bytes: int) -> _Batch:
    """A batch's records, signatures and lines from what a worker returned for it (sign_pool._prepare)."""
    fields, packed_signed, packed = prepared
    records: list[Record] = []
    for item, got in zip(batch, fields, strict=True):
        if got is None:  # not sent: oversize
            records.append(parse_line(item.raw, max_doc_bytes))
        elif type(got) is tuple:
            doc_id, text, updated_at_us, source, title = got
            records.append(Document(doc_id, text, updated_at_us, source, item.raw, title))
        else:
            records.append(got)
    signatures = iter(unpack_signed(packed_signed, engine.signer.fingerprint, engine.signer.params.num_perm))
    signed = [next(signatures) if isinstance(r, Document) else None for r in records]
    if packed is None:
        return batch, records, signed, None
    each = iter(unpack_lines(packed))
    return batch, records, signed, [next(each) if isinstance(r, Document) else None for r in records]


@dataclass
class _Ahead:
    """A batch read ahead, and the pool's work on it once submitted."""

    batch: list[InputLine]
    future: Future[PreparedLines] | None = None


def _deletion(raw: bytes) -> Record:
    """A line of a deletions file: a bare id, or a JSON object with a string ``id``."""
    text = raw.strip()
    if not text.startswith(b"{"):
        try:
            return Deletion(text.decode("utf-8")) if text else Invalid("missing-id", "empty line in a deletions file")
        except UnicodeDecodeError as exc:
            return Invalid("invalid-utf8", f"deletion id is not valid UTF-8 at byte {exc.start}")
    try:
        doc_id = orjson.loads(text).get("id")
    except (orjson.JSONDecodeError, AttributeError):
        return Invalid("not-json", "a deletions line starting with { must be a JSON object with an id")
    if not isinstance(doc_id, str) or not doc_id:
        return Invalid("missing-id", 'a deletions line needs a non-empty string "id"')
    return Deletion(doc_id)


def _write(out: IO[bytes] | None, events: list[Event]) -> None:
    if out is None:
        return
    out.write(b"".join(orjson.dumps(e) + b"\n" for e in events))
    out.flush()


def expire(engine: DedupeEngine, ids: list[str], events_out: IO[bytes] | None, batch_size: int) -> Counter[str]:
    """Remove documents (retention) as deletions, committing batch by batch; returns event counts."""
    counts: Counter[str] = Counter()
    for start in range(0, len(ids), batch_size):
        events = engine.process([Deletion(doc_id) for doc_id in ids[start : start + batch_size]])
        _write(events_out, events)
        counts.update(event["event"] for event in events)
        engine.commit()
    return counts
