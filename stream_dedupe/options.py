"""Command-line options shared by several commands.

Options that shape the index default to None (a run without them uses the state's values), so
typer has no default of its own to show: :func:`default_help` writes it into the help text,
taken from :class:`~stream_dedupe.config.DedupeParams`, escaped so that rich does not read
``[default: 0.8]`` as markup and drop it.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Annotated, Any, get_args

import typer

from stream_dedupe.config import BoilerplateConfig, DedupeParams
from stream_dedupe.consoles import escape
from stream_dedupe.errors import ConfigError

DEFAULTS = DedupeParams()


def default_help(text: str, default: object) -> str:
    """``text [default: default]``, with the brackets escaped for rich markup."""
    return escape(f"{text} [default: {default}]")


def state_help(text: str, default: object) -> str:
    """:func:`default_help` of a parameter a state keeps: an existing state's value, else ``default``."""
    return default_help(text, f"the state's, else {default}")


def for_state(option: Any) -> Any:
    """An option type of this module for a command over a state: its default is the state's, else the usual one."""
    info = copy.copy(option.__metadata__[0])
    info.help = info.help.replace("[default: ", "[default: the state's, else ", 1)
    return Annotated[get_args(option)[0], info]


ThresholdOpt = Annotated[float | None, typer.Option(help=default_help("Jaccard threshold.", DEFAULTS.threshold))]
NumPermOpt = Annotated[int | None, typer.Option(help=default_help("MinHash permutations.", DEFAULTS.num_perm))]
ShingleOpt = Annotated[str | None, typer.Option(help=default_help("Shingles: word:K or char:K.", DEFAULTS.shingle))]
LshMarginOpt = Annotated[
    float | None, typer.Option(help=default_help("LSH tuned for threshold minus this.", DEFAULTS.lsh_margin))
]
LearnOpt = Annotated[
    bool | None,
    typer.Option(
        "--learn-boilerplate/--no-learn-boilerplate",
        help=default_help("Learn and strip boilerplate lines (retroactive, per source).", "on"),
        show_default=False,
    ),
]
MinDocsOpt = Annotated[
    int | None,
    typer.Option(
        help=default_help("Documents of a source a line must occur in (0: off).", DEFAULTS.boilerplate.min_docs)
    ),
]
MinLineTokensOpt = Annotated[
    int | None,
    typer.Option(help=default_help("Shorter lines are never boilerplate.", DEFAULTS.boilerplate.min_tokens)),
]


def boilerplate_config(learn: bool | None, min_docs: int | None, min_tokens: int | None) -> BoilerplateConfig | None:
    """The learning settings given on the command line, or None when none was given.

    ``min_docs`` 0 turns learning off, as the worker's ``--boilerplate-min-docs 0`` does; other
    values are checked by :class:`~stream_dedupe.config.BoilerplateConfig` (never replaced by
    the default).
    """
    if learn is None and min_docs is None and min_tokens is None:
        return None
    defaults = BoilerplateConfig()
    if min_docs == 0:
        if learn:
            raise ConfigError(
                "--learn-boilerplate and --boilerplate-min-docs 0 (learning off) contradict each other: pass one"
            )
        learn, min_docs = False, None
    learning = defaults.learn if learn is None else learn
    return BoilerplateConfig(
        learning,
        defaults.min_docs if min_docs is None else min_docs,
        defaults.min_tokens if min_tokens is None else min_tokens,
    )


SourceThresholdOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--source-threshold",
        help=default_help(
            "SOURCE=T: threshold for one source's documents (repeatable; a pair uses the stricter; 1.0 = exact only).",
            "none",
        ),
        show_default=False,
    ),
]
TitleGuardOpt = Annotated[
    bool | None,
    typer.Option(
        "--title-guard/--no-title-guard",
        help=default_help("Documents whose titles differ are never duplicates.", "on"),
        show_default=False,
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


# The same options for a command over a state (``dedupe``): their default is the state's value.
if TYPE_CHECKING:  # the same types; at run time only their help differs
    StateThresholdOpt = ThresholdOpt
    StateNumPermOpt = NumPermOpt
    StateShingleOpt = ShingleOpt
    StateLshMarginOpt = LshMarginOpt
    StateSourceThresholdOpt = SourceThresholdOpt
    StateTitleGuardOpt = TitleGuardOpt
    StateLearnOpt = LearnOpt
    StateMinDocsOpt = MinDocsOpt
    StateMinLineTokensOpt = MinLineTokensOpt
else:
    StateThresholdOpt = for_state(ThresholdOpt)
    StateNumPermOpt = for_state(NumPermOpt)
    StateShingleOpt = for_state(ShingleOpt)
    StateLshMarginOpt = for_state(LshMarginOpt)
    StateSourceThresholdOpt = for_state(SourceThresholdOpt)
    StateTitleGuardOpt = for_state(TitleGuardOpt)
    StateLearnOpt = for_state(LearnOpt)
    StateMinDocsOpt = for_state(MinDocsOpt)
    StateMinLineTokensOpt = for_state(MinLineTokensOpt)
