"""The ``stream-dedupe`` command line: a thin shell over the engine and the exports.

No ``from __future__ import annotations`` here: typer reads every command's annotations, and
string annotations it would evaluate twice per run (``inspect.signature`` and
``typing.get_type_hints``: ~5 ms of a one-line ``dedupe``).
"""

import dataclasses
import gc
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Annotated, Any

import typer

from stream_dedupe import __version__
from stream_dedupe.cli_coerce import FastCommands
from stream_dedupe.cli_state import EVENTS_HELP, boilerplate, clusters, expire, explain, stats
from stream_dedupe.cli_support import (
    EXIT_CUT_SHORT,
    check_new_state_dir,
    check_outputs,
    directory_bytes,
    gc_from_here,
    invalid_summary,
    is_state,
    one_blas_thread,
    open_out,
    silence_stdout,
    small_run,
    start_up_without_gc,
)
from stream_dedupe.config import DedupeParams, NormalizationConfig, RuntimeLimits, ShingleSpec
from stream_dedupe.consoles import stderr_console
from stream_dedupe.errors import ConfigError, StreamDedupeError
from stream_dedupe.options import (
    StateLearnOpt,
    StateLshMarginOpt,
    StateMinDocsOpt,
    StateMinLineTokensOpt,
    StateNumPermOpt,
    StateShingleOpt,
    StateSourceThresholdOpt,
    StateThresholdOpt,
    StateTitleGuardOpt,
    boilerplate_config,
    default_help,
    source_thresholds,
    state_help,
)

app = typer.Typer(
    name="stream-dedupe",
    cls=FastCommands,
    help="Remove near-duplicate documents from a crawl: MinHash + LSH + verification + clusters.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",  # help texts escape their brackets (options.default_help)
    context_settings={"help_option_names": ["-h", "--help"]},
)
err = stderr_console()  # rich only on a terminal

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


_D = DedupeParams()


@app.command()
def dedupe(
    state: StateOpt,
    inputs: Annotated[
        list[str] | None,
        typer.Argument(
            help="JSONL inputs (plain, or gzip, bzip2 or xz compressed), or - for stdin; none with --deletions only.",
            show_default=False,
        ),
    ] = None,
    events: Annotated[str | None, typer.Option(help=EVENTS_HELP)] = None,
    deduped: Annotated[
        str | None,
        typer.Option(
            help=default_help(
                "Write the deduped set as JSONL to this file (- for stdout): the original JSON of every "
                "representative (each cluster's canonical, and any member that no representative covers).",
                "none",
            )
        ),
    ] = None,
    deletions: Annotated[
        list[str] | None,
        typer.Option(help=default_help("File of ids to delete, one per line, after the inputs (repeatable).", "none")),
    ] = None,
    threshold: StateThresholdOpt = None,
    num_perm: StateNumPermOpt = None,
    seed: Annotated[int | None, typer.Option(help=state_help("MinHash seed.", _D.seed))] = None,
    shingle: StateShingleOpt = None,
    min_tokens: Annotated[
        int | None, typer.Option(help=state_help("Shorter documents: exact match only.", _D.min_tokens))
    ] = None,
    lsh_margin: StateLshMarginOpt = None,
    estimate_margin: Annotated[
        float | None,
        typer.Option(help=state_help("--verify estimate: required above the threshold.", _D.estimate_margin)),
    ] = None,
    bands: Annotated[
        int | None, typer.Option(help=state_help("LSH bands (with --rows).", "chosen from the LSH threshold"))
    ] = None,
    rows: Annotated[int | None, typer.Option(help=state_help("Rows per LSH band (with --bands).", "chosen"))] = None,
    verify: Annotated[str | None, typer.Option(help=state_help("Verification: estimate or exact.", _D.verify))] = None,
    strip_pattern: Annotated[
        list[str] | None, typer.Option(help=state_help("Regex removed from texts (repeatable).", "none"))
    ] = None,
    header_pattern: Annotated[
        list[str] | None, typer.Option(help=state_help("Leading lines matching are dropped.", "none"))
    ] = None,
    footer_pattern: Annotated[
        list[str] | None, typer.Option(help=state_help("Trailing lines matching are dropped.", "none"))
    ] = None,
    source_threshold: StateSourceThresholdOpt = None,
    title_guard: StateTitleGuardOpt = None,
    learn_boilerplate: StateLearnOpt = None,
    boilerplate_min_docs: StateMinDocsOpt = None,
    boilerplate_min_tokens: StateMinLineTokensOpt = None,
    max_doc_bytes: Annotated[int, typer.Option(help="Larger records are invalid (too-large).")] = 1 << 20,
    max_bucket_size: Annotated[
        int,
        typer.Option(help="LSH bucket cap: hot buckets stop growing (bigger clusters are still covered)."),
    ] = 500,
    batch_size: Annotated[int, typer.Option(help="Documents per batch and per atomic commit.")] = 512,
    strict: Annotated[bool, typer.Option(help="Exit 1 if any record was invalid.")] = False,
    abandon_unfinished: Annotated[
        bool,
        typer.Option(
            help="Run even though the state's last run did not finish and could still be resumed (it then cannot be)."
        ),
    ] = False,
    jobs: Annotated[
        int | None,
        typer.Option(
            help=default_help(
                "Processes: parse and sign in N-1 worker processes, decide in this one; the same events for any N "
                "(0: the usable cores; inputs under 4 MB or on stdin are signed in-process).",
                "2, or 1 on one usable core",
            )
        ),
    ] = None,
    index_shards: Annotated[
        int | None,
        typer.Option(
            help=default_help(
                "Index shards: keep signatures, shingle sets and band tables in N processes with their own "
                "state under STATE/shards (a new state only; then taken from the state).",
                "1",
            )
        ),
    ] = None,
    progress: Annotated[
        bool, typer.Option(help="Progress on stderr (a bar on a terminal, else a line every 10 s).")
    ] = True,
    warm_start: Annotated[
        bool,
        typer.Option(
            help="Keep the indexes in STATE/warm-start.npz (10,000+ documents) so the next run skips the scan."
        ),
    ] = True,
) -> None:
    """Dedupe JSONL documents into a state directory; runs are incremental and resumable."""
    from stream_dedupe.inputs import InputReadError, check_inputs, total_bytes

    inputs = inputs or []
    if inputs or not deletions:
        check_inputs(inputs)  # no input at all: says what to pass
    if deletions:
        check_inputs(deletions, "--deletions")
    check_outputs(reads=[*inputs, *(deletions or ())], events=events, deduped=deduped)
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
    if not is_state(state):  # every flag is checked before the directory is created
        check_new_state_dir(state)
        from stream_dedupe.core.layout import resolve

        resolve(resolve_params(None, overrides))

    from stream_dedupe import run_guard, warm_file
    from stream_dedupe.checkpoint import can_redo
    from stream_dedupe.core import jit
    from stream_dedupe.core.engine import DedupeEngine, stored_params
    from stream_dedupe.embedded import run
    from stream_dedupe.exports import iter_canonical_documents, summarize
    from stream_dedupe.reporting import ProgressReporter, print_summary, warm_kernels
    from stream_dedupe.sharded_state import open_state
    from stream_dedupe.sign_pool import default_jobs, start_pool, usable_cores
    from stream_dedupe.storage.rocks import SMALL_RUN_BYTES

    if jobs is not None and jobs < 0:
        raise ConfigError(f"--jobs must be 0 (the usable cores) or more, got {jobs}")
    if index_shards is not None and index_shards < 1:
        raise ConfigError(f"--index-shards must be 1 (no shards) or more, got {index_shards}")
    # numba only for a big run; a state with a warm start has no band tables to rebuild
    warm = warm_start and (state / warm_file.FILE_NAME).is_file()
    jit.choose(total_bytes(inputs), 0 if warm else directory_bytes(state))
    gc_from_here()  # start-up is over (main() paused the collector); before forking a --jobs pool
    with ExitStack() as stack:
        processes = default_jobs() if jobs is None else jobs or usable_cores()
        pool = start_pool(processes, total_bytes(inputs))  # before RocksDB's threads
        if pool is not None:
            stack.callback(pool.close)
        # a run that can redo what a kill loses writes without RocksDB's log (1.2x faster)
        small = small_run(inputs, total_bytes(inputs), SMALL_RUN_BYTES)
        redo = can_redo(inputs, deletions or (), events)
        store = open_state(state, index_shards, memtable_bloom=not small, wal=not redo)
        stack.callback(store.close)
        warm_arrays = warm_file.load(store) if warm_start else None
        engine = DedupeEngine(resolve_params(stored_params(store), overrides), store, limits, warm_arrays)
        if progress and jit.enabled():
            warm_kernels(err, engine.params)
        resuming = run_guard.settle(store, state, inputs, deletions or (), events, abandon_unfinished, err)
        named = None if events in (None, "-") else Path(events)
        events_out = open_out(stack, events, "ab" if resuming else "wb")
        events_file = named if named is not None and named.is_file() else None  # not a pipe
        reporter = stack.enter_context(ProgressReporter(err, total_bytes(inputs), enabled=progress))
        try:
            result = run(
                engine,
                inputs,
                events_out,
                limits.batch_size,
                limits.max_doc_bytes,
                reporter.update,
                deletions or (),
                pool,
                events_file,
            )
        except InputReadError as exc:
            reporter.close()
            raise ConfigError(run_guard.cut_input_message(exc, named)) from exc
        except BrokenPipeError:
            # Not the quiet exit 0 of a listing into `head`: the run did not finish. 141 is what a
            # shell reports for a command a closed pipe ends (128 + SIGPIPE), e.g. under pipefail.
            reporter.close()
            silence_stdout()
            err.out(
                "stopped: the reader of standard output went away before the input's end; the state holds every "
                "batch committed before (the same command again goes on from there, for file inputs)"
            )
            raise typer.Exit(EXIT_CUT_SHORT) from None
        reporter.close()
        if warm_start:
            warm_file.save(store, engine)  # every batch is committed, interrupted or not
        else:
            warm_file.discard(store)
        if result.interrupted:
            again = (
                "Run the same command again to resume."
                if "-" not in inputs and "-" not in (deletions or ())
                else "Standard input cannot be resumed: send the rest of the input (all of it will do: the "
                "documents committed are `unchanged` now) with --events to another file."
            )
            err.print(f"[yellow]interrupted[/] after {result.lines:,} lines; the state is consistent. {again}")
            raise typer.Exit(130)
        if deduped:
            with ExitStack() as outputs:
                out = open_out(outputs, deduped, "wb")  # - is standard output
                assert out is not None
                for raw in iter_canonical_documents(store):
                    out.write(raw + b"\n")
                out.flush()
        print_summary(err, result, summarize(store), engine)
        if result.lines and result.counters["invalid"] == result.lines:
            err.print(
                f"[yellow]warning[/]: every one of the {result.lines:,} lines read was invalid: is the input JSON "
                "lines (one object per line, plain or gzip, bzip2 or xz compressed)? The `invalid` events say why"
            )
    if strict and result.counters["invalid"]:
        err.print(f"[red]--strict[/]: {invalid_summary(result.counters, result.first_invalid, events)}")
        raise typer.Exit(1)


app.command()(clusters)
app.command()(explain)
app.command()(expire)
app.command()(boilerplate)
app.command()(stats)


#: Commands whose modules import heavy dependencies (Faust, aiokafka) at import time are
#: registered only when asked for (or for the command list), so that ``dedupe`` starts without them.


def _name(command: Any) -> str:
    return str(command.name or getattr(command.callback, "__name__", ""))


def _registered() -> set[str]:
    return {_name(c) for c in app.registered_commands}


def _register_commands(argv: list[str]) -> str | None:
    """Register the commands this invocation can reach.

    A run of one of this module's commands keeps only that one: typer builds every registered
    command's options (type hints, defaults) before parsing, ~20 ms of start-up for the others.
    The command list (``--help``), an unknown name and the other commands see all of them.
    Returns the command's name (None without one).
    """
    command = next((arg for arg in argv if not arg.startswith("-")), None)
    if command is not None and command in _registered() and "eval" not in _registered():
        app.registered_commands = [c for c in app.registered_commands if _name(c) == command]
        return command
    from stream_dedupe.quality.cli import eval_command, tune

    if "eval" not in _registered():
        from stream_dedupe.reshard import reshard_command

        app.command("eval")(eval_command)
        app.command()(tune)
        app.command("reshard")(reshard_command)
    if (command is None or command not in _registered()) and "worker" not in _registered():
        from stream_dedupe.worker.cli import worker
        from stream_dedupe.worker.produce_cli import produce
        from stream_dedupe.worker.reshard import worker_reshard

        app.command()(worker)
        app.command()(produce)
        app.command("worker-reshard")(worker_reshard)
    return command


def main() -> None:
    """Console-script entry point: runs the app and turns our errors into clear messages.

    ``dedupe`` starts without the garbage collector and turns it on when its work starts
    (:func:`~stream_dedupe.cli_support.gc_from_here`); every other command turns it on here.
    On the way out, what the command allocated is frozen: the interpreter's final collection
    then does not scan it again (~0.02 s of a one-line ``dedupe``; files and the state are
    closed by then, and nothing here relies on a finalizer at exit).
    """
    one_blas_thread()
    start_up_without_gc()
    if _register_commands(sys.argv[1:]) != "dedupe":
        gc_from_here()
    try:
        app()
    except StreamDedupeError as exc:
        sys.stderr.write(f"error: {exc}\n")  # plain text: messages must not be re-wrapped
        sys.exit(2)
    finally:
        gc_from_here()  # an error before dedupe's work began
        gc.freeze()
