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
    SourceThresholdOpt,
    ThresholdOpt,
    TitleGuardOpt,
    boilerplate_config,
    default_help,
    source_thresholds,
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
    from stream_dedupe.errors import ConfigError
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
    if not raws:
        what = f" ({skipped.total:,} line(s) skipped, first: {skipped.first})" if skipped.total else ""
        raise ConfigError(f"{', '.join(corpus)} holds no documents{what}: nothing to measure")
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
    source_threshold: SourceThresholdOpt = None,
    title_guard: TitleGuardOpt = None,
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
            "source_thresholds": source_thresholds(source_threshold),
            "title_guard": title_guard,
        },
    )
    skipped.report(Console(stderr=True, soft_wrap=True))
    report = evaluate(raws, params, datasketch=datasketch)
    if json_out:
        result = {**report.to_json(), "skipped_lines": skipped.total, "skipped_by_reason": dict(skipped.reasons)}
        sys.stdout.write(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        from stream_dedupe.consoles import stdout_console

        render_report(stdout_console(), report)


def tune(
    corpus: CorpusArg,
    out: Annotated[Path, typer.Option(help="Directory for lsh-scurve.png and borderline.html.")] = Path("tune-out"),
    threshold: ThresholdOpt = None,
    num_perm: NumPermOpt = None,
    shingle: ShingleOpt = None,
    lsh_margin: LshMarginOpt = None,
    bands: Annotated[
        int | None, typer.Option(help=default_help("LSH bands (with --rows), as dedupe takes them.", "chosen"))
    ] = None,
    rows: Annotated[int | None, typer.Option(help=default_help("Rows per LSH band (with --bands).", "chosen"))] = None,
    pairs: Annotated[int, typer.Option(help="Borderline pairs on the review page.")] = 40,
) -> None:
    """Plot the LSH S-curve over the corpus and write a review page of the borderline pairs."""
    from stream_dedupe.extras import require

    require("tune", "matplotlib")  # the `tools` extra, not in the runtime install
    from stream_dedupe.quality.review_page import write_review_page
    from stream_dedupe.quality.tune import candidate_pairs, plot_scurve

    given = {"threshold": threshold, "num_perm": num_perm, "lsh_margin": lsh_margin, "shingle": shingle}
    params, raws, skipped = _load(corpus, {**given, "bands": bands, "rows": rows})
    skipped.report(Console(stderr=True, soft_wrap=True))
    result = candidate_pairs(raws, params)
    out.mkdir(parents=True, exist_ok=True)
    plot_scurve(result, out / "lsh-scurve.png")
    shown = write_review_page(result, out / "borderline.html", pairs)
    layout = f"{result.params.bands} bands x {result.params.rows} rows"
    Console(stderr=True, soft_wrap=True).print(
        f"{len(result.pairs):,} candidate pairs ({layout}); "
        f"wrote {out / 'lsh-scurve.png'} and {out / 'borderline.html'} ({shown} borderline pairs)"
    )


def retrieval_eval_command(
    corpus: CorpusArg,
    queries: Annotated[
        str | None, typer.Option(help='JSONL queries {"query_id", "query", "relevant": \\[ids]}.')
    ] = None,
    topics: Annotated[
        str | None, typer.Option(help="TREC topics (<top> blocks or qid<TAB>query), with --qrels.")
    ] = None,
    qrels: Annotated[
        str | None, typer.Option(help="TREC qrels (qid iteration docid relevance), with --topics.")
    ] = None,
    query_field: Annotated[
        str | None, typer.Option(help="Known-item query from this field (else: query, title, first line).")
    ] = None,
    query_pattern: Annotated[
        str | None, typer.Option(help="Known-item query: first match of this regex in the text (group 1).")
    ] = None,
    label_field: Annotated[
        str | None, typer.Option(help="Documents with the same value are the same document (relevance, redundancy).")
    ] = None,
    max_queries: Annotated[int, typer.Option(help="Draw this many known-item queries (seeded; 0: all).")] = 2000,
    query_seed: Annotated[int, typer.Option(help="Seed of the query draw.")] = 1,
    k: Annotated[int, typer.Option("--k", help="Cutoff of recall, nDCG, MRR and redundancy.")] = 5,
    alias: Annotated[
        str,
        typer.Option(
            help="verified: a representative answers for a document it covers only at J >= threshold; any: always."
        ),
    ] = "verified",
    state: Annotated[Path | None, typer.Option(help="Read the dedup result from this state.")] = None,
    clusters: Annotated[str | None, typer.Option(help="Read the dedup result from a clusters export.")] = None,
    events: Annotated[str | None, typer.Option(help="Read the dedup result from an events file.")] = None,
    threshold: ThresholdOpt = None,
    num_perm: NumPermOpt = None,
    seed: Annotated[int | None, typer.Option(help=default_help("MinHash seed.", 1))] = None,
    shingle: ShingleOpt = None,
    min_tokens: Annotated[
        int | None, typer.Option(help=default_help("Shorter documents: exact match only.", 10))
    ] = None,
    lsh_margin: LshMarginOpt = None,
    estimate_margin: Annotated[float | None, typer.Option(help=default_help("--verify estimate margin.", 0.01))] = None,
    verify: Annotated[str | None, typer.Option(help=default_help("Verification: exact or estimate.", "exact"))] = None,
    learn_boilerplate: LearnOpt = None,
    boilerplate_min_docs: MinDocsOpt = None,
    boilerplate_min_tokens: MinLineTokensOpt = None,
    source_threshold: SourceThresholdOpt = None,
    title_guard: TitleGuardOpt = None,
    batch_size: Annotated[int, typer.Option(help="Documents per engine batch.")] = 512,
    show: Annotated[int, typer.Option(help="Lost queries listed in the table.")] = 10,
    json_out: Annotated[bool, typer.Option("--json", help="Print the report as JSON instead of tables.")] = False,
) -> None:
    """BM25 retrieval before and after dedup: recall, nDCG, MRR, redundancy@k, and every query lost."""
    import orjson

    from stream_dedupe.errors import ConfigError
    from stream_dedupe.quality.queries import known_item_queries, load_corpus, load_query_file, load_trec
    from stream_dedupe.quality.retrieval import require_tools, retrieval_eval
    from stream_dedupe.quality.retrieval_report import render_retrieval

    require_tools()
    if alias not in ("verified", "any"):
        raise ConfigError(f"--alias must be verified or any, got {alias!r}")
    if sum(x is not None for x in (state, clusters, events)) > 1:
        raise ConfigError("give at most one of --state, --clusters and --events (none: dedup the corpus here)")
    if (topics is None) != (qrels is None):
        raise ConfigError("--topics and --qrels go together")
    overrides = {
        "threshold": threshold,
        "num_perm": num_perm,
        "seed": seed,
        "min_tokens": min_tokens,
        "lsh_margin": lsh_margin,
        "estimate_margin": estimate_margin,
        "verify": verify,
        "shingle": shingle,
        "boilerplate": boilerplate_config(learn_boilerplate, boilerplate_min_docs, boilerplate_min_tokens),
        "source_thresholds": source_thresholds(source_threshold),
        "title_guard": title_guard,
    }
    params = _params(overrides)
    docs = load_corpus(corpus)
    if not docs:
        raise ConfigError(f"{', '.join(corpus)} holds no documents (JSON lines with a string id and text)")
    result, params = _dedup_result(corpus, params, state, clusters, events, batch_size)
    if queries is not None:
        query_set = load_query_file(queries)
    elif topics is not None and qrels is not None:
        query_set = load_trec(topics, qrels)
    else:
        query_set = known_item_queries(docs, query_field, query_pattern, label_field, max_queries or None, query_seed)
    report = retrieval_eval(docs, query_set, result, params, k, "any" if alias == "any" else "verified", label_field)
    if json_out:
        sys.stdout.write(orjson.dumps(report.to_json(), option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        from stream_dedupe.consoles import stdout_console

        render_retrieval(stdout_console(), report, show)


def _params(overrides: dict[str, Any]) -> DedupeParams:
    from stream_dedupe.cli import resolve_params

    shingle = overrides.get("shingle")
    return resolve_params(None, {**overrides, "shingle": ShingleSpec.parse(shingle) if shingle else None})


def _dedup_result(
    corpus: list[str],
    params: DedupeParams,
    state: Path | None,
    clusters: str | None,
    events: str | None,
    batch_size: int,
) -> tuple[Any, DedupeParams]:
    """The dedup result to evaluate, and the parameters of its exact Jaccard."""
    from stream_dedupe.quality.dedup_result import DedupResult

    if clusters is not None:
        return DedupResult.from_clusters_file(clusters), params
    if events is not None:
        return DedupResult.from_events_file(events), params
    if state is not None:
        from stream_dedupe.cli_support import open_existing

        store, stored = open_existing(state)
        try:
            return DedupResult.from_store(store), stored
        finally:
            store.close()
    from stream_dedupe.config import RuntimeLimits
    from stream_dedupe.core.engine import DedupeEngine
    from stream_dedupe.embedded import run
    from stream_dedupe.storage.memory import MemoryStore

    store = MemoryStore()
    limits = RuntimeLimits(batch_size=batch_size)
    outcome = run(DedupeEngine(params, store, limits), corpus, None, batch_size, limits.max_doc_bytes)
    if outcome.interrupted:
        # a partial dedup would count the unread documents as kept: measure nothing rather than that
        raise typer.Exit(130)
    return DedupResult.from_store(store), params


def _register_retrieval_eval() -> None:
    # stream_dedupe/cli.py registers eval and tune by name; retrieval-eval registers itself here,
    # once the root app exists (this module is imported by stream_dedupe.cli after app is made).
    import stream_dedupe.cli as root

    if not any(c.name == "retrieval-eval" for c in root.app.registered_commands):
        root.app.command("retrieval-eval")(retrieval_eval_command)


_register_retrieval_eval()
