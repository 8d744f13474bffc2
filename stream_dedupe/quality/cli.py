"""``eval`` and ``tune``: the quality commands (a thin shell over :mod:`stream_dedupe.quality`)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from stream_dedupe.config import DedupeParams, ShingleSpec
from stream_dedupe.options import (
    LearnOpt,
    LshMarginOpt,
    MinDocsOpt,
    MinLineTokensOpt,
    NumPermOpt,
    ShingleOpt,
    ThresholdOpt,
    boilerplate_config,
)

CorpusArg = Annotated[list[str], typer.Argument(help="JSONL corpus (.jsonl, .jsonl.gz, or - for stdin).")]


def _load(corpus: list[str], overrides: dict[str, Any]) -> tuple[DedupeParams, list[bytes]]:
    """Parameters (explicit options over the defaults) and the corpus's non-blank lines."""
    from stream_dedupe.cli import resolve_params
    from stream_dedupe.inputs import check_inputs, read_lines

    check_inputs(corpus)
    shingle = overrides.pop("shingle", None)
    params = resolve_params(None, {**overrides, "shingle": ShingleSpec.parse(shingle) if shingle else None})
    return params, [line.raw for path in corpus for line in read_lines(path) if line.raw.strip()]


def eval_command(
    corpus: CorpusArg,
    threshold: ThresholdOpt = None,
    num_perm: NumPermOpt = None,
    shingle: ShingleOpt = None,
    min_tokens: Annotated[int | None, typer.Option(help="Shorter documents are left out [default: 10].")] = None,
    lsh_margin: LshMarginOpt = None,
    learn_boilerplate: LearnOpt = None,
    boilerplate_min_docs: MinDocsOpt = None,
    boilerplate_min_tokens: MinLineTokensOpt = None,
    datasketch: Annotated[bool, typer.Option(help="Also run datasketch's MinHashLSH on the same shingles.")] = True,
    json_out: Annotated[bool, typer.Option("--json", help="Print the report as JSON instead of tables.")] = False,
) -> None:
    """Measure precision and recall against exact Jaccard (both verification modes, and datasketch)."""
    import orjson

    from stream_dedupe.quality.evaluate import evaluate
    from stream_dedupe.quality.report import render_report

    params, raws = _load(
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
    report = evaluate(raws, params, datasketch=datasketch)
    if json_out:
        sys.stdout.write(orjson.dumps(report.to_json(), option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        render_report(Console(), report)


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
    from stream_dedupe.extras import require

    require("tune", "matplotlib")  # the `tools` extra, not in the runtime install
    from stream_dedupe.quality.review_page import write_review_page
    from stream_dedupe.quality.tune import candidate_pairs, plot_scurve

    params, raws = _load(
        corpus, {"threshold": threshold, "num_perm": num_perm, "lsh_margin": lsh_margin, "shingle": shingle}
    )
    result = candidate_pairs(raws, params)
    out.mkdir(parents=True, exist_ok=True)
    plot_scurve(result, out / "lsh-scurve.png")
    shown = write_review_page(result, out / "borderline.html", pairs)
    Console(stderr=True, soft_wrap=True).print(
        f"{len(result.pairs):,} candidate pairs; wrote {out / 'lsh-scurve.png'} and "
        f"{out / 'borderline.html'} ({shown} borderline pairs)"
    )
