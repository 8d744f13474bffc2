"""Command-line options shared by several commands."""

from __future__ import annotations

from typing import Annotated

import typer

from stream_dedupe.config import BoilerplateConfig
from stream_dedupe.errors import ConfigError

ThresholdOpt = Annotated[float | None, typer.Option(help="Jaccard threshold [default: 0.8].")]
NumPermOpt = Annotated[int | None, typer.Option(help="MinHash permutations [default: 128].")]
ShingleOpt = Annotated[str | None, typer.Option(help="Shingles: word:K or char:K [default: word:3].")]
LshMarginOpt = Annotated[float | None, typer.Option(help="LSH tuned for threshold minus this [default: 0.2].")]
LearnOpt = Annotated[
    bool | None,
    typer.Option("--learn-boilerplate/--no-learn-boilerplate", help="Learn and strip boilerplate lines [default: on]."),
]
MinDocsOpt = Annotated[int | None, typer.Option(help="Documents of a source a line must occur in [default: 100].")]
MinLineTokensOpt = Annotated[int | None, typer.Option(help="Shorter lines are never boilerplate [default: 3].")]


def boilerplate_config(learn: bool | None, min_docs: int | None, min_tokens: int | None) -> BoilerplateConfig | None:
    """The learning settings given on the command line, or None when none was given."""
    if learn is None and min_docs is None and min_tokens is None:
        return None
    return BoilerplateConfig(True if learn is None else learn, min_docs or 100, min_tokens or 3)


SourceThresholdOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--source-threshold",
        help="SOURCE=T: threshold for one source's documents (repeatable; a pair uses the stricter; 1.0 = exact only).",
    ),
]
TitleGuardOpt = Annotated[
    bool | None,
    typer.Option(
        "--title-guard/--no-title-guard",
        help="Documents whose titles differ are never duplicates [default: on].",
    ),
]


def source_thresholds(values: list[str] | None) -> tuple[tuple[str, float], ...] | None:
    """Parse ``SOURCE=T`` flags into sorted pairs (None when none was given).

    Raises:
        ConfigError: if a value is not ``SOURCE=NUMBER``.

    """
    if not values:
        return None
    pairs = []
    for value in values:
        name, sep, number = value.rpartition("=")
        try:
            threshold = float(number)
        except ValueError:
            threshold = -1.0
        if not sep or not name or threshold < 0:
            raise ConfigError(f"--source-threshold takes SOURCE=THRESHOLD, e.g. release-notes=0.95; got {value!r}")
        pairs.append((name, threshold))
    return tuple(sorted(pairs))
