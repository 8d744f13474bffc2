"""The ``stream-dedupe`` command line: a thin shell over the engine and the exports."""

from __future__ import annotations

import dataclasses
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import IO, Annotated, Any

import typer
from rich.console import Console

from stream_dedupe import __version__
from stream_dedupe.config import DedupeParams, NormalizationConfig, RuntimeLimits, ShingleSpec
from stream_dedupe.errors import ConfigError, StreamDedupeError
from stream_dedupe.options import (
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
    source_thresholds,
)

app = typer.Typer(
    name="stream-dedupe",
    help="Remove near-duplicate documents from a crawl: MinHash + LSH + verification + clusters.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
err = Console(stderr=True, soft_wrap=True)

StateOpt = Annotated[Path, typer.Option("--state", help="State directory (RocksDB); created if missing.")]


def _version(value: bool) -> None:
    if value:
        print(f"stream-dedupe {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Remove near-duplicate documents from a crawl."""


def resolve_params(stored: DedupeParams | None, overrides: dict[str, Any]) -> DedupeParams:
    """Parameters for a run: explicit options, else those stored in the state, else the defaults.

    Options that shape the LSH layout (threshold, num_perm, lsh_margin) given without explicit
    bands/rows let the layout be chosen again; the engine then refuses a state built otherwise.
    """
    explicit = {k: v for k, v in overrides.items() if v is not None}
    layout = {"threshold", "num_perm", "lsh_margin", "source_thresholds"}
    if explicit.keys() & layout and not explicit.keys() & {"bands", "rows"}:
        explicit.update(bands=0, rows=0)
    return dataclasses.replace(stored or DedupeParams(), **explicit)


def _normalization(strip: list[str] | None, header: list[str] | None, footer: list[str] | None) -> Any:
    if strip is None and header is None and footer is None:
        return None
    return NormalizationConfig(tuple(strip or ()), tuple(header or ()), tuple(footer or ()))


def _open_out(stack: ExitStack, path: str | None, mode: str) -> IO[bytes] | None:
    if path is None:
        return None
    if path == "-":
        return sys.stdout.buffer
    return stack.enter_context(open(path, mode))


@app.command()
def dedupe(
    inputs: Annotated[list[str], typer.Argument(help="JSONL inputs (.jsonl, .jsonl.gz), or - for stdin.")],
    state: StateOpt,
    events: Annotated[str | None, typer.Option(help="Write events as JSONL to this file (- for stdout).")] = None,
    deduped: Annotated[str | None, typer.Option(help="Write the canonical documents as JSONL to this file.")] = None,
    deletions: Annotated[
        list[str] | None, typer.Option(help="File of ids to delete, one per line, after the inputs (repeatable).")
    ] = None,
    threshold: ThresholdOpt = None,
    num_perm: NumPermOpt = None,
    seed: Annotated[int | None, typer.Option(help="MinHash seed [default: 1].")] = None,
    shingle: ShingleOpt = None,
    min_tokens: Annotated[int | None, typer.Option(help="Shorter documents: exact match only [default: 10].")] = None,
    lsh_margin: LshMarginOpt = None,
    estimate_margin: Annotated[
        float | None, typer.Option(help="--verify estimate: required above the threshold [default: 0.01].")
    ] = None,
    bands: Annotated[int | None, typer.Option(help="LSH bands (with --rows) instead of the chosen ones.")] = None,
    rows: Annotated[int | None, typer.Option(help="Rows per LSH band (with --bands).")] = None,
    verify: Annotated[str | None, typer.Option(help="Verification: exact or estimate [default: exact].")] = None,
    source_threshold: SourceThresholdOpt = None,
    title_guard: TitleGuardOpt = None,
    strip_pattern: Annotated[list[str] | None, typer.Option(help="Regex removed from texts (repeatable).")] = None,
    header_pattern: Annotated[list[str] | None, typer.Option(help="Leading lines matching are dropped.")] = None,
    footer_pattern: Annotated[list[str] | None, typer.Option(help="Trailing lines matching are dropped.")] = None,
    learn_boilerplate: LearnOpt = None,
    boilerplate_min_docs: MinDocsOpt = None,
    boilerplate_min_tokens: MinLineTokensOpt = None,
    max_doc_bytes: Annotated[int, typer.Option(help="Larger records are invalid (too-large).")] = 1 << 20,
    max_bucket_size: Annotated[int, typer.Option(help="LSH bucket cap (hot buckets stop growing).")] = 500,
    batch_size: Annotated[int, typer.Option(help="Documents per batch and per atomic commit.")] = 512,
    strict: Annotated[bool, typer.Option(help="Exit 1 if any record was invalid.")] = False,
    progress: Annotated[bool, typer.Option(help="Show a progress bar on stderr.")] = True,
) -> None:
    """Dedupe JSONL documents into a state directory; runs are incremental and resumable."""
    from stream_dedupe.core.engine import DedupeEngine, stored_params
    from stream_dedupe.embedded import run
    from stream_dedupe.exports import iter_canonical_documents, summarize
    from stream_dedupe.inputs import check_inputs, total_bytes
    from stream_dedupe.reporting import ProgressReporter, print_summary
    from stream_dedupe.storage.rocks import RocksStore

    check_inputs(inputs)
    if deletions:
        check_inputs(deletions)
    overrides = {
        "threshold": threshold,
        "num_perm": num_perm,
        "seed": seed,
        "shingle": ShingleSpec.parse(shingle) if shingle else None,
        "min_tokens": min_tokens,
        "lsh_margin": lsh_margin,
        "estimate_margin": estimate_margin,
        "bands": bands,
        "rows": rows,
        "verify": verify,
        "source_thresholds": source_thresholds(source_threshold),
        "title_guard": title_guard,
        "normalization": _normalization(strip_pattern, header_pattern, footer_pattern),
        "boilerplate": boilerplate_config(learn_boilerplate, boilerplate_min_docs, boilerplate_min_tokens),
    }
    limits = RuntimeLimits(max_doc_bytes=max_doc_bytes, max_bucket_size=max_bucket_size, batch_size=batch_size)
    store = RocksStore(state)
    with ExitStack() as stack:
        stack.callback(store.close)
        engine = DedupeEngine(resolve_params(stored_params(store), overrides), store, limits)
        from stream_dedupe.embedded import resume_point

        resuming = resume_point(store, inputs, deletions or ()) is not None
        events_out = _open_out(stack, events, "ab" if resuming else "wb")
        reporter = stack.enter_context(ProgressReporter(err, total_bytes(inputs), enabled=progress))
        result = run(
            engine, inputs, events_out, limits.batch_size, limits.max_doc_bytes, reporter.update, deletions or ()
        )
        reporter.close()
        if result.interrupted:
            err.print(
                f"[yellow]interrupted[/] after {result.lines} lines; the state is consistent. "
                "Run the same command again to resume."
            )
            raise typer.Exit(130)
        if deduped:
            with open(deduped, "wb") as out:
                for raw in iter_canonical_documents(store):
                    out.write(raw + b"\n")
        print_summary(err, result, summarize(store), engine)
    if strict and result.counters["invalid"]:
        err.print(f"[red]--strict[/]: {result.counters['invalid']} invalid record(s); see the invalid events.")
        raise typer.Exit(1)


@app.command()
def clusters(
    state: StateOpt,
    output: Annotated[str, typer.Option("--output", "-o", help="Write JSONL here (- for stdout).")] = "-",
    min_size: Annotated[int, typer.Option(help="Smallest cluster to export (1 includes singletons).")] = 2,
) -> None:
    """Export clusters as JSONL: {"cluster", "canonical", "size", "members"}."""
    import orjson

    from stream_dedupe.exports import iter_clusters

    store = _open_existing(state)
    with ExitStack() as stack:
        stack.callback(store.close)
        out = _open_out(stack, output, "wb")
        assert out is not None
        for cluster in iter_clusters(store, min_size):
            out.write(orjson.dumps(cluster) + b"\n")
        out.flush()


@app.command()
def explain(
    a: Annotated[str, typer.Argument(help="Document id (with --state), or a file (text or JSON document).")],
    b: Annotated[str, typer.Argument(help="Document id (with --state), or a file (text or JSON document).")],
    state: Annotated[Path | None, typer.Option(help="Look the ids up in this state.")] = None,
    shingle: Annotated[str | None, typer.Option(help="Shingles when comparing files [default: word:3].")] = None,
    threshold: Annotated[float | None, typer.Option(help="Threshold when comparing files [default: 0.8].")] = None,
    show: Annotated[int, typer.Option(help="How many shared shingles to print.")] = 10,
) -> None:
    """Show why two documents are (or are not) duplicates: Jaccard, shared shingles, bands."""
    from stream_dedupe.explain import explain_pair, load_pair, render

    if state is not None:
        store = _open_existing(state)
        try:
            from stream_dedupe.core.engine import stored_params

            params = stored_params(store)
            assert params is not None
            texts = load_pair(store, a, b)
        finally:
            store.close()
    else:
        params = resolve_params(
            None, {"shingle": ShingleSpec.parse(shingle) if shingle else None, "threshold": threshold}
        )
        texts = load_pair(None, a, b)
    render(Console(), explain_pair(params, texts[0], texts[1], (a, b)), show)


@app.command()
def expire(
    state: StateOpt,
    max_age: Annotated[list[str], typer.Option(help="SOURCE=AGE, e.g. news=7d (repeatable; =AGE: no source).")],
    now: Annotated[str | None, typer.Option(help="Reference time, RFC 3339 [default: now].")] = None,
    events: Annotated[str | None, typer.Option(help="Write events as JSONL to this file (- for stdout).")] = None,
    dry_run: Annotated[bool, typer.Option(help="Only list the ids that would expire.")] = False,
) -> None:
    """Forget documents older than their source's maximum age (removed like deletions)."""
    import time

    from stream_dedupe.core.engine import DedupeEngine, stored_params
    from stream_dedupe.core.records import parse_timestamp
    from stream_dedupe.core.retention import RetentionPolicy, expired_ids
    from stream_dedupe.embedded import expire as expire_documents

    policy = RetentionPolicy.parse(max_age)
    try:
        now_us = parse_timestamp(now) if now else int(time.time() * 1_000_000)
    except ValueError as exc:
        raise ConfigError(f"--now {now!r} is not RFC 3339 with a time zone (e.g. 2026-12-01T00:00:00Z)") from exc
    store = _open_existing(state)
    with ExitStack() as stack:
        stack.callback(store.close)
        ids = list(expired_ids(store, policy, now_us))
        if dry_run:
            sys.stdout.write("".join(f"{doc_id}\n" for doc_id in ids))
            return
        params = stored_params(store)
        assert params is not None
        engine = DedupeEngine(params, store)
        counts = expire_documents(engine, ids, _open_out(stack, events, "ab"), 512)
        err.print(
            f"expired {len(ids):,} documents; {counts['canonical-changed']:,} canonical changes, "
            f"{counts['cluster-split']:,} cluster splits"
        )


@app.command()
def boilerplate(
    state: StateOpt,
    source: Annotated[str | None, typer.Option(help="Only this source.")] = None,
) -> None:
    """List the learned boilerplate lines of a state: source, documents seen in, line."""
    import orjson

    from stream_dedupe.core.boilerplate import learned_lines
    from stream_dedupe.core.engine import stored_params
    from stream_dedupe.storage.state import StateView

    store = _open_existing(state)
    try:
        params = stored_params(store)
        assert params is not None
        if not params.boilerplate.learn:
            err.print("boilerplate learning is off for this state (enable it with --learn-boilerplate on a new state)")
        for line_source, documents, line in learned_lines(StateView(store), params.boilerplate.min_docs):
            if source is None or source == line_source:
                sys.stdout.write(
                    orjson.dumps({"source": line_source, "documents": documents, "line": line}).decode() + "\n"
                )
    finally:
        store.close()


def _open_existing(state: Path) -> Any:
    from stream_dedupe.storage.rocks import RocksStore

    if not (state / "CURRENT").exists():
        raise ConfigError(
            f"{state} is not a stream-dedupe state directory: run `stream-dedupe dedupe ... --state {state}`"
        )
    return RocksStore(state)


def _register_commands() -> None:
    # These modules import their heavy dependencies (Faust, matplotlib) only when a command runs.
    from stream_dedupe.quality.cli import eval_command, tune
    from stream_dedupe.worker.cli import produce, worker

    app.command("eval")(eval_command)
    app.command()(tune)
    app.command()(worker)
    app.command()(produce)


_register_commands()


def main() -> None:
    """Console-script entry point: runs the app and turns our errors into clear messages."""
    try:
        app()
    except StreamDedupeError as exc:
        sys.stderr.write(f"error: {exc}\n")  # plain text: messages must not be re-wrapped
        sys.exit(2)
