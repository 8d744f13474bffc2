"""Terminal output of the embedded command: progress, the kernels' first compilation, the summary.

On a terminal the progress is a rich bar; when stderr is a file or a pipe (CI logs, ``2> log``)
it is a plain line every :data:`LINE_INTERVAL` seconds and one at the end, never a bar wrapped
at 80 columns, and the summary is plain aligned text: rich is then not imported at all
(:mod:`stream_dedupe.consoles`).
"""

from __future__ import annotations

import time
from collections import Counter
from types import TracebackType
from typing import TYPE_CHECKING, Any

from stream_dedupe.core import jit

if TYPE_CHECKING:
    from stream_dedupe.config import DedupeParams
    from stream_dedupe.consoles import Output
    from stream_dedupe.core.engine import DedupeEngine
    from stream_dedupe.embedded import RunResult
    from stream_dedupe.exports import ClusterSummary

#: Seconds between two progress lines when stderr is not a terminal.
LINE_INTERVAL = 10.0
#: The first line of the summary (a terminal shows it as the table's title).
SUMMARY_TITLE = "stream-dedupe summary"


class ProgressReporter:
    """Progress on stderr: bytes read, documents, docs/s and ``duplicate-of`` events so far.

    Those count the documents covered on arrival, as the summary's ``duplicate-of`` row does; a
    document covered later (by a longer one that came after it) is counted in the summary's
    ``dropped`` row only, so the progress line does not call them all "duplicates".

    Args:
        console: Where to draw (stderr: rich's console on a terminal, else plain lines).
        total: Total input bytes, or None when unknown (stdin).
        enabled: False to draw nothing.

    """

    def __init__(self, console: Output, total: int | None, enabled: bool = True) -> None:
        self._console = console
        self._started = time.perf_counter()
        self._docs = 0
        self._dups = 0
        self._total = total
        self._position = 0
        self._enabled = enabled
        self._last_line = self._started
        self._progress: Any = None
        if enabled and console.is_terminal:
            from rich.console import Console
            from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn

            assert isinstance(console, Console)  # a terminal gets rich's console (consoles.stderr_console)

            self._progress = Progress(
                TextColumn("[bold]dedupe"),
                BarColumn(),
                DownloadColumn(),
                TextColumn(
                    "{task.fields[docs]:>9,} docs  {task.fields[rate]:>8,.0f} docs/s  "
                    "{task.fields[dups]:>8,} duplicate-of"
                ),
                TimeElapsedColumn(),
                console=console,
                transient=False,
            )
            self._task = self._progress.add_task("dedupe", total=total, docs=0, rate=0.0, dups=0)
        self._closed = False

    def __enter__(self) -> ProgressReporter:
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _rate(self) -> float:
        return self._docs / max(time.perf_counter() - self._started, 1e-9)

    def update(self, lines: int, position: int, counters: Counter[str]) -> None:
        """Advance after a committed batch."""
        self._docs += lines
        self._dups = counters["duplicate-of"]
        self._position = position
        if self._progress is not None:
            self._progress.update(self._task, completed=position, docs=self._docs, rate=self._rate(), dups=self._dups)
        elif self._enabled and time.perf_counter() - self._last_line >= LINE_INTERVAL:
            self._line()

    def _line(self) -> None:
        self._last_line = time.perf_counter()
        done = f" ({self._position / self._total:.0%} of the input)" if self._total else ""
        self._console.out(
            f"dedupe: {self._docs:,} docs, {self._rate():,.0f} docs/s, {self._dups:,} duplicate-of, "
            f"{self._last_line - self._started:.1f} s{done}",
            highlight=False,
        )

    def close(self) -> None:
        """Stop drawing; without a terminal, print the final line (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if self._progress is not None:
            self._progress.stop()
        elif self._enabled:
            self._line()


def warm_kernels(console: Output, params: DedupeParams) -> None:
    """Load the compiled kernels before the progress starts, saying so when they must be compiled.

    The first run after an install compiles them (numba, about a minute on a slow machine) and
    caches them on disk; later runs load them in well under a second.
    """
    from stream_dedupe.warmup import compiled_kernels, kernel_cache_dir, uncached_kernels, warm

    if jit.aot_active():
        return  # the ahead-of-time module: nothing to compile or load
    if uncached_kernels():
        console.out(
            "compiling the numba kernels (first run after an install only, up to a minute; "
            f"cached in {kernel_cache_dir()}) ...",
            highlight=False,
        )
    seconds = warm(params)
    compiled = compiled_kernels()
    if compiled:
        console.out(
            f"compiled {len(compiled)} numba kernels in {seconds:.1f} s; later runs load them from the cache",
            highlight=False,
        )


def summary_rows(result: RunResult, clusters: ClusterSummary, engine: DedupeEngine) -> list[tuple[str, str]]:
    """The summary's rows, (what, value): what this run decided and what the state now holds."""
    c = result.counters
    decided = c["new"] + c["duplicate-of"]
    rows = [
        ("input lines", f"{result.lines + result.resumed_from:,}"),
        ("new (entered the index)", f"{c['new']:,}"),
        ("duplicate-of (covered on arrival)", f"{c['duplicate-of']:,}"),
        ("  of which exact", f"{c['exact-duplicate']:,}"),
        ("unchanged", f"{c['unchanged']:,}"),
        ("deleted", f"{c['deleted']:,}"),
        ("invalid", f"{c['invalid']:,}"),
        ("duplicate rate on arrival", f"{(c['duplicate-of'] / decided if decided else 0.0):.2%}"),
        ("documents in state", f"{clusters.documents:,}"),
        ("representatives (the deduped set)", f"{clusters.representatives:,}"),
        ("dropped (each covered by a representative)", f"{clusters.documents - clusters.representatives:,}"),
        ("dropped rate", f"{1 - clusters.representatives / clusters.documents if clusters.documents else 0.0:.2%}"),
        ("clusters", f"{clusters.clusters:,}"),
        ("clusters with duplicates", f"{clusters.with_duplicates:,}"),
        ("largest cluster", f"{clusters.largest:,}"),
        ("largest cover (documents one representative holds)", f"{clusters.largest_cover:,}"),
        ("LSH candidates rejected", f"{engine.counters['rejected_candidates']:,}"),
        ("hot-bucket skips", f"{engine.counters['hot_bucket_skips']:,}"),
        ("representatives checked past full buckets", f"{engine.counters['full_bucket_candidates']:,}"),
        ("boilerplate lines stripped", f"{engine.counters['boilerplate_lines_stripped']:,}"),
        ("unchanged re-crawls recognized (texts not read)", f"{engine.counters['recognized_unchanged']:,}"),
        ("docs/s", f"{result.lines / result.seconds if result.seconds else 0.0:,.0f}"),
        ("kernels (ahead-of-time, numba or pure)", jit.kernel_mode()),
    ]
    if result.resumed_from:
        rows.insert(1, ("resumed after line", f"{result.resumed_from:,}"))
    return rows


def print_summary(console: Output, result: RunResult, clusters: ClusterSummary, engine: DedupeEngine) -> None:
    """The final summary: a rich table on a terminal, else the same rows as aligned plain text."""
    rows = summary_rows(result, clusters, engine)
    if not console.is_terminal:
        width = max(len(what) for what, _ in rows)
        values = max(len(value) for _, value in rows)
        lines = [SUMMARY_TITLE, *(f"  {what:<{width}}  {value:>{values}}" for what, value in rows)]
        console.out("\n".join(lines), highlight=False)
        return
    from rich.table import Table

    table = Table(title=SUMMARY_TITLE, show_header=False, title_justify="left")
    table.add_column("what")
    table.add_column("value", justify="right")
    for what, value in rows:
        table.add_row(what, value)
    console.print(table)
