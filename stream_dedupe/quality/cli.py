"""``eval`` and ``tune``: the quality commands (a thin shell over :mod:`stream_dedupe.quality`)."""

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from stream_dedupe.config import DedupeParams, ShingleSpec
from stream_dedupe.options import (
    DEFAULTS,
    LearnOpt,
    LshMarginOpt,
    MinDocsOpt,
    MinLineTokensOpt,
    NumPermOpt,
    ShingleOpt,
    ThresholdOpt,
    boilerplate_config,
    default_help,
)

#: eval and tune read whole corpora into memory: a long line is a long document, not an error.
_NO_SIZE_LIMIT = 1 << 62

CorpusArg = Annotated[list[str], typer.Argument(help="JSONL corpus (.jsonl, .jsonl.gz, or - for stdin).")]


@dataclass
class Skipped:
    """The corpus lines that are not documents: counted by reason, never a traceback.

    Attributes:
        reasons: Lines per reason (the ``invalid`` reasons of ``dedupe``, and ``deleted``).
        first: ``source:line: detail`` of the first one, to find it.

    """

    reasons: Counter[str] = field(default_factory=Counter)
    first: str | None = None

    @property
    def total(self) -> int:
        """How many lines were skipped."""
        return sum(self.reasons.values())

    def report(self, console: Console) -> None:
        """Say on stderr what was skipped (nothing when every line was a document)."""
        if not self.total:
            return
        reasons = ", ".join(f"{reason} {count:,}" for reason, count in sorted(self.reasons.items()))
        console.out(
            f"skipped {self.total:,} line(s) that are not documents ({reasons}); first: {self.first}",
            highlight=False,
        )


def _load(corpus: list[str], overrides: dict[str, Any]) -> tuple[DedupeParams, list[bytes], Skipped]:
    """Parameters (explicit options over the defaults), the corpus's documents, and the lines skipped.

    Each non-blank line is validated like ``dedupe`` validates it; blank lines are ignored.
    """
    from stream_dedupe.cli import resolve_params
    from stream_dedupe.core.records import Deletion, Invalid, parse_document
    from stream_dedupe.inputs import check_inputs, read_lines

    check_inputs(corpus)
    shingle = overrides.pop("shingle", None)
    params = resolve_params(None, {**overrides, "shingle": ShingleSpec.parse(shingle) if shingle else None})
    raws: list[bytes] = []
    skipped = Skipped()
    for path in corpus:
        for line in read_lines(path):
            if not line.raw.strip():
                continue
            record = parse_document(line.raw, _NO_SIZE_LIMIT)
            if isinstance(record, Invalid | Deletion):
                reason = record.reason if isinstance(record, Invalid) else "deleted"
                skipped.reasons[reason] += 1
                if skipped.first is None:
                    detail = record.detail if isinstance(record, Invalid) else "a deletion"
                    skipped.first = f"{line.source}:{line.line}: {detail}"
                continue
            raws.append(line.raw)
    return params, raws, skipped


def eval_command(
    corpus: CorpusArg,
    threshold: ThresholdOpt = None,
    num_perm: NumPermOpt = None,
    shingle: ShingleOpt = None,
    min_tokens: Annotated[
        int | None, typer.Option(help=default_help("Shorter documents are left out.", DEFAULTS.min_tokens))
    ] = None,
    lsh_margin: LshMarginOpt = None,
    learn_boilerplate: LearnOpt = None,
    boilerplate_min_docs: MinDocsOpt = None,
    boilerplate_min_tokens: MinLineTokensOpt = None,
    datasketch: Annotated[bool, typer.Option(help="Also run datasketch's MinHashLSH on the same shingles.")] = True,
    json_out: Annotated[
        bool, typer.Option("--json", help=default_help("Print the report as JSON instead of tables.", "off"))
    ] = False,
) -> None:
    """Measure precision and recall against exact Jaccard (both verification modes, and datasketch)."""
    import orjson

    from stream_dedupe.quality.evaluate import evaluate
    from stream_dedupe.quality.report import render_report

    params, raws, skipped = _load(
        corpus,
        {
            "threshold": threshold,
            "num_perm": num_perm,
            "min_tokens": min_tokens,
            "lsh_margin": lsh_margin,
            "shingle": shingle,
            "boilerplate": boilerplate_config(learn_boilerplate, boilerplate_min_docs, boilerplate_min_tokens),
        },
    )
    skipped.report(Console(stderr=True, soft_wrap=True))
    report = evaluate(raws, params, datasketch=datasketch)
    if json_out:
        result = {**report.to_json(), "skipped_lines": skipped.total, "skipped_by_reason": dict(skipped.reasons)}
        sys.stdout.write(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        from stream_dedupe.reporting import StdoutConsole

        render_report(StdoutConsole(), report)


def tune(
    corpus: CorpusArg,
    out: Annotated[Path, typer.Option(help="Directory for lsh-scurve.png and borderline.html.")] = Path("tune-out"),
    threshold: ThresholdOpt = None,
    num_perm: NumPermOpt = None,
    shingle: ShingleOpt = None,
    lsh_margin: LshMarginOpt = None,
    pairs: Annotated[int, typer.Option(help="Borderline pairs on the review page.")] = 40,
) -> None:
    """Plot the LSH S-curve over the corpus and write a review page of the borderline pairs."""
    from stream_dedupe.quality.review_page import write_review_page
    from stream_dedupe.quality.tune import candidate_pairs, plot_scurve

    params, raws, skipped = _load(
        corpus, {"threshold": threshold, "num_perm": num_perm, "lsh_margin": lsh_margin, "shingle": shingle}
    )
    skipped.report(Console(stderr=True, soft_wrap=True))
    result = candidate_pairs(raws, params)
    out.mkdir(parents=True, exist_ok=True)
    plot_scurve(result, out / "lsh-scurve.png")
    shown = write_review_page(result, out / "borderline.html", pairs)
    Console(stderr=True, soft_wrap=True).print(
        f"{len(result.pairs):,} candidate pairs; wrote {out / 'lsh-scurve.png'} and "
        f"{out / 'borderline.html'} ({shown} borderline pairs)"
    )
