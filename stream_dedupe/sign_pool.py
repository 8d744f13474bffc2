"""Signing in worker processes: ``dedupe --jobs N`` prepares batches in N - 1 processes and decides in one.

Parsing, signing (normalize, shingle, MinHash) and splitting a text into boilerplate lines depend
only on the input line and the index parameters, never on the state, so they can run anywhere;
the decisions stay in the main process, in input order. ``dedupe`` sends each batch of input
lines to a worker as one task (:meth:`SignPool.submit_lines`); the worker returns the documents'
fields, their :class:`~stream_dedupe.core.signer.Signed` records packed by column
(:mod:`~stream_dedupe.core.signedpack`) and their lines packed
(:mod:`~stream_dedupe.core.linepack`), which the engine takes as they are: the deciding process
then spends 181.6 instead of 241.4 us a document on 20 Newsgroups (``bench/jobs_parent.py``).
With learned boilerplate the workers sign the unstripped text and the engine signs again,
itself, the documents a learned line is stripped from (as it does for the Kafka worker's sign
stage), so the events are the same, byte for byte, for any N. The Kafka worker's sign stage
signs texts (:meth:`SignPool.submit`) into encoded records
(:func:`~stream_dedupe.core.signer.encode_signed`) for the index topic's headers.

The command's pool is made with the ``fork`` start method *before* the state is opened (no
RocksDB threads yet) and after the compiled kernels are loaded, so the workers start in
milliseconds with the kernels in memory. The Kafka worker (``worker --jobs N``) cannot fork: its
process already runs an event loop, Kafka clients and RocksDB threads. Its pool uses ``spawn``,
and each new process loads the compiled kernels before its first batch (``warm=True``).

The workers ignore SIGINT: Ctrl-C stops the main process cleanly after its current
batch, as without a pool. A worker that dies makes the next result raise :class:`SignPoolError`;
a main process that dies takes its workers with it.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from stream_dedupe.config import DedupeParams
from stream_dedupe.core import jit
from stream_dedupe.core.boilerplate import text_lines
from stream_dedupe.core.linepack import PackedLines, pack_lines
from stream_dedupe.core.records import Document, parse_line
from stream_dedupe.core.signedpack import PackedSigned, pack_signed
from stream_dedupe.core.signer import Signed, Signer
from stream_dedupe.errors import StreamDedupeError

if TYPE_CHECKING:  # concurrent.futures and multiprocessing: imported only when a pool starts
    from concurrent.futures import Future

#: Input bytes from which ``--jobs`` starts worker processes (smaller inputs sign in-process):
#: numba's threshold, since the workers need the compiled kernels to be worth their start.
POOL_BYTES = jit.INPUT_BYTES

_signers: dict[DedupeParams, Signer] = {}
T = TypeVar("T")
_DIED = (
    "a signing worker process died (killed, or out of memory?); the state is consistent up to the last "
    "committed batch: run the same command again to resume (--jobs 1 signs in one process)"
)


class SignPoolError(StreamDedupeError):
    """A signing worker process failed; the message says what to do."""


def usable_cores() -> int:
    """Cores this process may use: its CPU affinity, lowered to its cgroup's CPU quota; at least 1."""
    try:
        cores = max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        cores = max(1, os.cpu_count() or 1)
    quota = cgroup_cpu_quota()
    return cores if quota is None else max(1, min(cores, math.ceil(quota)))


#: ``dedupe``'s ``--jobs`` when none is given, at most :func:`usable_cores`: one worker process
#: beside the deciding one. Its work (parsing, signing, lines) is about a third of the deciding
#: process's, so a second one has nothing to do (measured on 2 cores, BENCHMARKS.md
#: "`dedupe --jobs N`": 1.15x as fast as ``--jobs 1`` at 20,000 documents, for 17% more CPU).
DEFAULT_JOBS = 2


def default_jobs() -> int:
    """``--jobs`` when none is given: :data:`DEFAULT_JOBS`, or fewer when fewer cores are usable."""
    return min(DEFAULT_JOBS, usable_cores())


#: Where Linux publishes a cgroup's CPU quota: v2 (``cpu.max``), then v1 (CFS quota and period).
CGROUP_V2_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")
CGROUP_V1_CPU_DIR = Path("/sys/fs/cgroup/cpu")


def cgroup_cpu_quota(v2: Path = CGROUP_V2_CPU_MAX, v1: Path = CGROUP_V1_CPU_DIR) -> float | None:
    """CPUs the cgroup's quota allows (a Kubernetes ``limits.cpu``), or None when there is no quota.

    Args:
        v2: The cgroup v2 ``cpu.max`` file (``"max 100000"`` or ``"<quota> <period>"``).
        v1: The cgroup v1 cpu controller directory (``cpu.cfs_quota_us``: -1 for none).

    """
    try:
        quota, period = v2.read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota_us = int((v1 / "cpu.cfs_quota_us").read_text())
        period_us = int((v1 / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return None if quota_us <= 0 or period_us <= 0 else quota_us / period_us


def _init_worker(parent: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the main process handles Ctrl-C
    # A worker must not outlive its parent (kill -9 of the main process): it would keep the
    # parent's stdout/stderr open, and whoever waits for them would hang. Linux kills it at
    # once; elsewhere the watchdog notices within a second.
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # pragma: no cover - not Linux/glibc
        pass
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True, name="sd-watch-parent").start()
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


def init_child(parent: int) -> None:
    """Set up a child process of the command (a signing worker, an index shard): see ``_init_worker``."""
    _init_worker(parent)


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(1)


def _warm_up() -> int:
    """Load the compiled kernels in a spawned worker (before its first real batch)."""
    jit.enable()
    Signer(DedupeParams()).sign(["load the compiled signing kernels in this signing process"])
    return os.getpid()


def _signer(params: DedupeParams) -> Signer:
    signer = _signers.get(params)
    if signer is None:
        signer = _signers[params] = Signer(params)
    return signer


def _sign(params: DedupeParams, texts: list[str]) -> list[bytes]:
    signer = _signer(params)
    return [signer.encode(s) for s in signer.sign(texts)]


#: What a worker returns for a batch of input lines (:meth:`SignPool.submit_lines`): per line a
#: document's fields ``(id, text, updated_at_us, source, title)``, or its record when it is not a
#: document, or None for a line it was not given; the documents' signed records, packed; and
#: their boilerplate lines, packed, when the parameters learn boilerplate.
PreparedLines = tuple[list[Any], PackedSigned, PackedLines | None]


def _prepare(params: DedupeParams, raws: list[bytes | None], max_doc_bytes: int) -> PreparedLines:
    """Parse, sign and split into boilerplate lines a batch of input lines (None: a line kept by the parent)."""
    out: list[Any] = []
    docs: list[Document] = []
    for raw in raws:
        record = None if raw is None else parse_line(raw, max_doc_bytes)
        if isinstance(record, Document):
            docs.append(record)
            out.append((record.doc_id, record.text, record.updated_at_us, record.source, record.title))
        else:
            out.append(record)
    texts = [d.text for d in docs]
    signer = _signer(params)
    signed = pack_signed(signer.sign(texts), signer.fingerprint, signer.params.num_perm)
    learn = params.boilerplate
    packed = pack_lines(text_lines(texts, [d.source for d in docs], learn.min_tokens)) if learn.learn else None
    return out, signed, packed


#: How often a wait for a signing worker checks that the worker is still alive.
LIVENESS_SECONDS = 0.5
_PROC = os.path.isdir("/proc/self")


def _gone(pid: int) -> bool:
    """True if process ``pid`` has exited (a zombie not yet reaped counts as gone)."""
    if _PROC:
        try:
            with open(f"/proc/{pid}/stat", "rb") as stat:
                return stat.read().rpartition(b")")[2].split()[0] in (b"Z", b"X")
        except OSError:
            return True
    try:  # no /proc: a signal 0 tells a process that is gone (a zombie still answers it)
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


class SignPool:
    """Worker processes that sign batches of texts, results in submission order.

    Args:
        workers: Number of worker processes (at least 1).
        start_method: ``fork`` (the command: before any thread exists) or ``spawn`` (a process
            that already runs threads, like the Kafka worker).
        warm: Load the compiled kernels in every worker before returning (for ``spawn``: a fork
            inherits them).

    """

    def __init__(self, workers: int, start_method: str = "fork", warm: bool = False) -> None:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        self.workers = workers
        self._executor = ProcessPoolExecutor(
            max_workers=workers,
            mp_context=multiprocessing.get_context(start_method),
            initializer=_init_worker,
            initargs=(os.getpid(),),
        )
        # Start every worker now (an executor starts them on first use; with spawn, one per task
        # submitted while none is idle, so submit one task per worker at once).
        task = _warm_up if warm else os.getpid
        self.pids = sorted({f.result() for f in [self._executor.submit(task) for _ in range(workers)]})

    def submit(self, signer: Signer, texts: Sequence[str]) -> Future[list[bytes]]:
        """Start signing ``texts`` with ``signer``'s parameters in a worker.

        Raises:
            SignPoolError: if a worker has died.

        """
        from concurrent.futures.process import BrokenProcessPool

        try:
            return self._executor.submit(_sign, signer.params, list(texts))
        except BrokenProcessPool as exc:
            raise SignPoolError(_DIED) from exc

    def submit_lines(self, params: DedupeParams, raws: list[bytes | None], max_doc_bytes: int) -> Future[PreparedLines]:
        """Start parsing, signing and splitting into lines a batch of input lines in a worker.

        This process then only decides (``dedupe --jobs``): :data:`PreparedLines` is what
        :meth:`outcome` returns for it. A line given as None is left to this process (an
        oversize one: it is not worth copying to be refused).

        Raises:
            SignPoolError: if a worker has died.

        """
        from concurrent.futures.process import BrokenProcessPool

        try:
            return self._executor.submit(_prepare, params, raws, max_doc_bytes)
        except BrokenProcessPool as exc:
            raise SignPoolError(_DIED) from exc

    def result(self, signer: Signer, future: Future[list[bytes]]) -> list[Signed | None]:
        """The records of a submitted batch (None for any the signer does not accept).

        Raises:
            SignPoolError: if the worker died or failed.

        """
        return [signer.decode(blob) for blob in self.outcome(future)]

    def outcome(self, future: Future[T]) -> T:
        """What a worker returned for a submitted task, checking while waiting that the workers are alive.

        Raises:
            SignPoolError: if the worker died or failed.

        """
        from concurrent.futures import TimeoutError as FutureTimeout
        from concurrent.futures.process import BrokenProcessPool

        try:
            while True:
                try:
                    return future.result(timeout=LIVENESS_SECONDS)
                except FutureTimeout:
                    self.check()
        except BrokenProcessPool as exc:
            raise SignPoolError(_DIED) from exc
        except SignPoolError:
            raise
        except Exception as exc:
            raise SignPoolError(
                f"a signing worker process failed: {exc!r}; run the same command again to resume, "
                "with --jobs 1 to see the error in the main process"
            ) from exc

    def check(self) -> None:
        """Raise if a worker process is gone, whether or not the executor has noticed.

        ``ProcessPoolExecutor`` learns of a dead worker from its result pipe and the process
        sentinels; a worker killed while it was writing a result leaves a partial message, and
        the executor's thread then waits for the rest of it forever: its futures never finish
        (seen in CI: a kill -9 of the worker's signing process under load stalled the stream).

        Raises:
            SignPoolError: if a worker has died.

        """
        if self.dead():
            raise SignPoolError(_DIED)

    def dead(self) -> bool:
        """True if a worker process has exited."""
        return any(_gone(pid) for pid in self.pids)

    def abandon(self) -> None:
        """Drop a pool whose worker died: kill the others, free the executor's thread, do not wait."""
        for pid in self.pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        # The executor's thread may be blocked reading the rest of a dead worker's result; with
        # every writer of the result pipe closed its read ends, it sees the pool broken and exits
        # (otherwise the interpreter's exit would wait for it forever).
        queue = getattr(self._executor, "_result_queue", None)
        writer = getattr(queue, "_writer", None)
        if writer is not None:
            with contextlib.suppress(OSError):
                writer.close()
        self._executor.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        """Stop the workers (pending batches are dropped); a pool with a dead worker is abandoned."""
        if self.dead():
            self.abandon()
            return
        self._executor.shutdown(wait=True, cancel_futures=True)


def start_pool(jobs: int, input_bytes: int | None) -> SignPool | None:
    """A pool of ``jobs - 1`` workers when ``jobs > 1`` and the input is big enough, else None.

    Loads the compiled kernels first (numba), so that the forked workers have them.
    """
    threshold = int(os.environ.get("STREAM_DEDUPE_POOL_BYTES", POOL_BYTES))  # tests: a pool for a small input
    if jobs <= 1 or input_bytes is None or input_bytes < threshold:
        return None
    jit.enable()
    Signer(DedupeParams()).sign(["load the compiled signing kernels before forking the workers"])
    return SignPool(jobs - 1)
