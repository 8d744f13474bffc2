"""Terminal tables for ``stream-dedupe retrieval-eval``."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from stream_dedupe.quality.retrieval import RetrievalReport


def render_retrieval(console: Console, report: RetrievalReport, show: int = 10) -> None:
    """Print the before/after metrics and the first ``show`` lost queries."""
    k = report.k
    console.print(
        f"{report.documents:,} documents, {report.indexed:,} kept by dedup; {report.queries:,} queries; "
        f"a dropped document is answered by its representative: {report.alias} "
        f"(exact Jaccard >= {report.threshold}); redundancy by {report.redundancy_by}"
    )
    table = Table(title=f"BM25 before and after dedup (k = {k})", title_justify="left")
    for column in ("index", "documents", f"recall@{k}", f"success@{k}", f"nDCG@{k}", f"MRR@{k}", f"redundancy@{k}"):
        table.add_column(column, justify="left" if column == "index" else "right")
    for s in (report.before, report.after, *([report.ideal] if report.ideal else [])):
        table.add_row(
            s.name,
            f"{s.documents:,}",
            f"{s.recall:.3f}",
            f"{s.success:.3f}",
            f"{s.ndcg:.3f}",
            f"{s.mrr:.3f}",
            f"{s.redundancy:.3f}",
        )
    console.print(table)
    console.print(f"queries lost: {len(report.lost):,}; gained: {len(report.gained):,}")
    if report.dropped_across_labels is not None:
        console.print(
            f"dropped documents: {report.dropped:,}, of which {report.dropped_across_labels:,} "
            "replaced by a document of another label (false duplicates by the labels)"
        )
    if not report.lost or show <= 0:
        return
    lost = Table(title=f"lost queries (first {min(show, len(report.lost))})", title_justify="left")
    for column in ("query", "dropped document", "its representative", "Jaccard", "rep. retrieved"):
        lost.add_column(column, justify="right" if column == "Jaccard" else "left")
    for q in report.lost[:show]:
        if not q.dropped:
            lost.add_row(q.query, "(none dropped: ranking moved)", "", "", "")
        for d in q.dropped:
            lost.add_row(
                q.query, d.id, d.representative, f"{d.similarity:.3f}", "yes" if d.representative_retrieved else "no"
            )
    console.print(lost)
