"""Terminal tables for ``stream-dedupe eval``."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from stream_dedupe.quality.evaluate import EvalReport


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def render_report(console: Console, report: EvalReport) -> None:
    """Print the evaluation as tables."""
    console.print(
        f"{report.documents:,} documents, {report.in_scope:,} long enough for near-duplicate matching; "
        f"exact ground truth at Jaccard >= {report.threshold} in {report.truth_seconds:.1f} s"
    )
    table = Table(title="pairs against exact Jaccard", title_justify="left")
    for column in ("method", "precision", "recall", "F1", "true", "predicted", "ARI", "cand/doc", "seconds"):
        table.add_column(column, justify="left" if column == "method" else "right")
    for m in report.methods:
        s = m.scores
        table.add_row(
            m.name,
            _pct(s.precision),
            _pct(s.recall),
            _pct(s.f1),
            f"{s.true_pairs:,}",
            f"{s.predicted_pairs:,}",
            _pct(m.ari),
            _pct(m.candidates_per_doc),
            f"{m.seconds:.1f}",
        )
    console.print(table)
    bands = list(report.methods[0].recall_by_band) if report.methods else []
    by_band = Table(title="recall by true similarity", title_justify="left")
    by_band.add_column("method")
    for band in bands:
        by_band.add_column(band, justify="right")
    for m in report.methods:
        by_band.add_row(m.name, *(_pct(m.recall_by_band[b]) for b in bands))
    console.print(by_band)
    if any(m.families for m in report.methods):
        fam = Table(title="pairs judged by the corpus's family labels", title_justify="left")
        for column in ("method", "within-family pairs", "found", "false pairs across families"):
            fam.add_column(column, justify="left" if column == "method" else "right")
        for m in report.methods:
            f = m.families
            fam.add_row(
                m.name,
                f"{f['pairs_within_families']:,}",
                f"{f['found_within_families']:,}",
                f"{f['false_pairs_across_families']:,}",
            )
        console.print(fam)
    if any(m.recall_by_label for m in report.methods):
        labels = sorted({label for m in report.methods for label in m.recall_by_label})
        by_label = Table(title="share of documents clustered with their source, by label", title_justify="left")
        by_label.add_column("method")
        for label in labels:
            by_label.add_column(label, justify="right")
        for m in report.methods:
            by_label.add_row(m.name, *(_pct(m.recall_by_label.get(label)) for label in labels))
        console.print(by_label)
    _render_index_checks(console, report)


def _render_index_checks(console: Console, report: EvalReport) -> None:
    """What each engine run left in the index: residual duplicates, loss, largest groups."""
    checked = [m for m in report.methods if m.index is not None]
    if not checked:
        return
    table = Table(title=f"what the index keeps (label-free, exact Jaccard >= {report.threshold})", title_justify="left")
    columns = (
        "method",
        "kept",
        "dropped",
        "residual dup. pairs",
        "lost",
        "lost as compared",
        "largest cluster",
        "largest cover",
    )
    for column in columns:
        table.add_column(column, justify="left" if column == "method" else "right")
    for m in checked:
        c = m.index
        assert c is not None
        table.add_row(
            m.name,
            f"{c.kept:,}",
            f"{c.dropped:,}",
            f"{c.residual_pairs:,}",
            f"{c.lost:,}",
            "-" if c.lost_as_compared is None else f"{c.lost_as_compared:,}",
            f"{c.largest_component:,}",
            f"{c.largest_cover:,}",
        )
    console.print(table)
    console.print(
        "residual: indexed pairs still at or above the threshold; lost: dropped documents below it "
        "against the document that replaced them, on the full texts "
        + (
            "(with learned boilerplate the engine compares the texts without their learned lines, so a "
            "pair whose full texts differ by such lines can count here; 0 with --verify exact and "
            "--no-learn-boilerplate)"
            if report.learned_boilerplate
            else "(must be 0 with --verify exact)"
        )
        + "; lost as compared: the same on the texts the engine compared (must be 0 with --verify exact)"
    )
    for m in checked:
        assert m.index is not None
        for lost in m.index.lost_examples[:3]:
            console.print(
                f"  {m.name}: lost {lost['id']} (represented by {lost['representative']}, J = {lost['similarity']:.3f})"
            )
