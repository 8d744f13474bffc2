"""The commands that read or change an existing state: ``clusters``, ``expire``, ``boilerplate``.

Registered on the app by :mod:`stream_dedupe.cli` (no ``from __future__ import annotations``,
for the same reason as there: typer reads the annotations).
"""

import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Annotated

import typer

from stream_dedupe.cli_support import check_outputs, open_existing, open_out
from stream_dedupe.consoles import stderr_console
from stream_dedupe.errors import ConfigError
from stream_dedupe.options import default_help

err = stderr_console()  # rich only on a terminal
ExistingStateOpt = Annotated[
    Path, typer.Option("--state", help="State directory written by `stream-dedupe dedupe` (must exist).")
]
EVENTS_HELP = default_help("Write events as JSONL to this file (- for stdout).", "none")


def clusters(
    state: ExistingStateOpt,
    output: Annotated[str, typer.Option("--output", "-o", help="Write JSONL here (- for stdout).")] = "-",
    min_size: Annotated[int, typer.Option(help="Smallest cluster to export (1 includes singletons).")] = 2,
) -> None:
    """Export clusters as JSONL: {"cluster", "canonical", "size", "members", "representatives", "covered_by"}."""
    import orjson

    from stream_dedupe.exports import iter_clusters

    check_outputs(output=output)
    store, _ = open_existing(state)
    with ExitStack() as stack:
        stack.callback(store.close)
        out = open_out(stack, output, "wb")
        assert out is not None
        for cluster in iter_clusters(store, min_size):
            out.write(orjson.dumps(cluster) + b"\n")
        out.flush()


def expire(
    state: ExistingStateOpt,
    max_age: Annotated[list[str], typer.Option(help="SOURCE=AGE, e.g. news=7d (repeatable; =AGE: no source).")],
    now: Annotated[str | None, typer.Option(help=default_help("Reference time, RFC 3339.", "now"))] = None,
    events: Annotated[str | None, typer.Option(help=EVENTS_HELP)] = None,
    dry_run: Annotated[bool, typer.Option(help="Only list the ids that would expire.")] = False,
) -> None:
    """Forget documents older than their source's maximum age (removed like deletions)."""
    import time

    from stream_dedupe.core.engine import DedupeEngine
    from stream_dedupe.core.records import parse_timestamp
    from stream_dedupe.core.retention import RetentionPolicy, expired_ids
    from stream_dedupe.embedded import expire as expire_documents

    policy = RetentionPolicy.parse(max_age)
    try:
        now_us = parse_timestamp(now) if now else int(time.time() * 1_000_000)
    except ValueError as exc:
        raise ConfigError(f"--now {now!r} is not RFC 3339 with a time zone (e.g. 2026-12-01T00:00:00Z)") from exc
    check_outputs(events=events)
    store, params = open_existing(state)
    with ExitStack() as stack:
        stack.callback(store.close)
        ids = list(expired_ids(store, policy, now_us))
        if dry_run:
            sys.stdout.write("".join(f"{doc_id}\n" for doc_id in ids))
            return
        engine = DedupeEngine(params, store)
        counts = expire_documents(engine, ids, open_out(stack, events, "ab"), 512)
        err.print(
            f"expired {len(ids):,} documents; {counts['canonical-changed']:,} canonical changes, "
            f"{counts['cluster-split']:,} cluster splits"
        )


def boilerplate(
    state: ExistingStateOpt,
    source: Annotated[str | None, typer.Option(help=default_help("Only this source.", "every source"))] = None,
) -> None:
    """List the learned boilerplate lines of a state as JSON lines: source, documents, line.

    Its "documents" is how many documents of the source carried the line when it was learned: the
    state's --boilerplate-min-docs (a learned line is stripped, and no longer counted).
    """
    import orjson

    from stream_dedupe.core.boilerplate import learned_lines
    from stream_dedupe.storage.state import StateView

    store, params = open_existing(state)
    try:
        if not params.boilerplate.learn:
            err.print("boilerplate learning is off for this state (enable it with --learn-boilerplate on a new state)")
        listed = 0
        for line_source, documents, line in learned_lines(StateView(store), params.boilerplate.min_docs):
            if source is None or source == line_source:
                listed += 1
                sys.stdout.write(
                    orjson.dumps({"source": line_source, "documents": documents, "line": line}).decode() + "\n"
                )
        if not listed and params.boilerplate.learn:  # stdout stays empty (a script reads no line); say why
            where = f"source {source!r}" if source is not None else "any source"
            err.print(
                f"no line learned for {where} yet: a line is learned once {params.boilerplate.min_docs:,} documents "
                "of one source carry it"
            )
    finally:
        store.close()
