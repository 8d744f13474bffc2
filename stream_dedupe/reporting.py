"""Terminal output of the embedded command: a progress bar and the final summary table."""

from __future__ import annotations

import time
from collections import Counter
from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from stream_dedupe.core.engine import DedupeEngine
from stream_dedupe.embedded import RunResult
from stream_dedupe.exports import ClusterSummary


class ProgressReporter:
    """A rich progress bar on stderr: bytes read, documents, docs/s and duplicates so far.

    Args:
        console: Where to draw (stderr).
        total: Total input bytes, or None when unknown (stdin).
        enabled: False to draw nothing.

    """

    def __init__(self, console: Console, total: int | None, enabled: bool = True) -> None:
        self._started = time.perf_counter()
        self._docs = 0
        self._progress = Progress(
            TextColumn("[bold]dedupe"),
            BarColumn(),
            DownloadColumn(),
            TextColumn("{task.fields[docs]:>9,} docs  {task.fields[rate]:>8,.0f} docs/s  {task.fields[dups]:>8,} dups"),
            TimeElapsedColumn(),
            console=console,
            disable=not enabled,
            transient=False,
        )
        self._task: TaskID = self._progress.add_task("dedupe", total=total, docs=0, rate=0.0, dups=0)

    def __enter__(self) -> ProgressReporter:
        self._progress.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def update(self, lines: int, position: int, counters: Counter[str]) -> None:
        """Advance after a committed batch."""
        self._docs += lines
        rate = self._docs / max(time.perf_counter() - self._started, 1e-9)
        self._progress.update(self._task, completed=position, docs=self._docs, rate=rate, dups=counters["duplicate-of"])

    def close(self) -> None:
        """Stop drawing (idempotent)."""
        self._progress.stop()


def print_summary(console: Console, result: RunResult, clusters: ClusterSummary, engine: DedupeEngine) -> None:
    """The final table: what this run decided and what the state now holds."""
    c = result.counters
    decided = c["new"] + c["duplicate-of"]
    table = Table(title="stream-dedupe summary", show_header=False, title_justify="left")
    table.add_column("what")
    table.add_column("value", justify="right")
    rows = [
        ("input lines", f"{result.lines + result.resumed_from:,}"),
        ("new", f"{c['new']:,}"),
        ("duplicates", f"{c['duplicate-of']:,}"),
        ("  of which exact", f"{c['exact-duplicate']:,}"),
        ("unchanged", f"{c['unchanged']:,}"),
        ("invalid", f"{c['invalid']:,}"),
        ("duplicate rate", f"{(c['duplicate-of'] / decided if decided else 0.0):.2%}"),
        ("documents in state", f"{clusters.documents:,}"),
        ("clusters (canonical documents)", f"{clusters.clusters:,}"),
        ("clusters with duplicates", f"{clusters.with_duplicates:,}"),
        ("largest cluster", f"{clusters.largest:,}"),
        ("LSH candidates rejected", f"{engine.counters['rejected_candidates']:,}"),
        ("hot-bucket skips", f"{engine.counters['hot_bucket_skips']:,}"),
        ("boilerplate lines stripped", f"{engine.counters['boilerplate_lines_stripped']:,}"),
        ("docs/s", f"{result.lines / result.seconds if result.seconds else 0.0:,.0f}"),
    ]
    if result.resumed_from:
        rows.insert(1, ("resumed after line", f"{result.resumed_from:,}"))
    for what, value in rows:
        table.add_row(what, value)
    console.print(table)
