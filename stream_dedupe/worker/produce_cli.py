"""``stream-dedupe produce``: load JSONL documents into the input topic, as a crawler would.

Registered on the main command line in :mod:`stream_dedupe.cli`; the sending is
:mod:`stream_dedupe.worker.produce`.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

import typer

from stream_dedupe.worker.cli_options import (
    SaslMechanism,
    SaslPassword,
    SaslPasswordFile,
    SaslUsername,
    SecurityProtocol,
    SslCafile,
    SslCertfile,
    SslKeyfile,
    err,
    opt,
)
from stream_dedupe.worker.settings import WorkerSettings


def produce(
    inputs: Annotated[
        list[str], typer.Argument(help="JSONL inputs (plain, or gzip, bzip2 or xz compressed), or - for stdin.")
    ],
    broker: Annotated[str | None, opt("broker", "Kafka bootstrap host:port [default: 127.0.0.1:9092].")] = None,
    topic: Annotated[str | None, opt("input_topic", "Topic to write [default: crawl.documents].")] = None,
    partitions: Annotated[
        int | None, opt("input_partitions", "Partitions if the topic is created [default: 4].")
    ] = None,
    replication_factor: Annotated[
        int | None, opt("replication_factor", "Replicas if the topic is created; 1 for one local broker [default: 3].")
    ] = None,
    progress: Annotated[bool, typer.Option(help="Show a progress bar on stderr (when it is a terminal).")] = True,
    security_protocol: SecurityProtocol = None,
    sasl_mechanism: SaslMechanism = None,
    sasl_username: SaslUsername = None,
    sasl_password: SaslPassword = None,
    sasl_password_file: SaslPasswordFile = None,
    ssl_cafile: SslCafile = None,
    ssl_certfile: SslCertfile = None,
    ssl_keyfile: SslKeyfile = None,
) -> None:
    """Load JSONL documents into the input topic (key = id, value = the line), waiting for every ack."""
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

    from stream_dedupe.inputs import check_inputs, total_bytes
    from stream_dedupe.worker.produce import MAX_REQUEST_BYTES
    from stream_dedupe.worker.produce import produce as send_all
    from stream_dedupe.worker.security import client_security
    from stream_dedupe.worker.topics import prepare_input_topic

    check_inputs(inputs)
    settings = WorkerSettings.load(
        broker=broker,
        input_topic=topic,
        input_partitions=partitions,
        replication_factor=replication_factor,
        security_protocol=security_protocol,
        sasl_mechanism=sasl_mechanism,
        sasl_username=sasl_username,
        sasl_password=sasl_password,
        sasl_password_file=sasl_password_file,
        ssl_cafile=ssl_cafile,
        ssl_certfile=ssl_certfile,
        ssl_keyfile=ssl_keyfile,
    )
    total = total_bytes(inputs)

    async def main() -> Any:
        created = await prepare_input_topic(
            settings.bootstrap, settings.input_topic, settings.input_partitions, settings=settings
        )
        if created:
            err.print(f"created topic {settings.input_topic} ({settings.input_partitions} partitions)")
        columns = (TextColumn("[bold]produce"), BarColumn(), DownloadColumn(), TextColumn("{task.fields[n]} records"))
        drawn = progress and err.is_terminal  # a bar in a log file or a pipe is noise: the summary line says it all
        with Progress(*columns, TimeRemainingColumn(), console=err, disable=not drawn, transient=False) as bar:
            task = bar.add_task("produce", total=total, n=0)
            return await send_all(
                settings.bootstrap,
                settings.input_topic,
                inputs,
                lambda n, pos: bar.update(task, completed=pos, n=n),
                security=client_security(settings),
                compression=settings.producer_compression,
            )

    result = asyncio.run(main())
    rate = result.records / result.seconds if result.seconds else 0.0
    acknowledged = result.acknowledgement()
    err.print(
        f"sent {result.records:,} records ({result.bytes / 1e6:.1f} MB) to {settings.input_topic} in "
        f"{result.seconds:.1f}s ({rate:,.0f}/s); {result.without_key:,} without an id key, {result.blank:,} blank "
        f"lines skipped; {acknowledged}"
    )
    if result.refused:
        err.print(
            f"[red]error[/]: {result.refused:,} line(s) were not sent, the first at {result.first_refused}. A line "
            "larger than the topic's max.message.bytes cannot reach it (nor the worker's DLQ): split or shorten "
            "it, or raise max.message.bytes on the topic (and --max-doc-bytes on the worker)"
            + (f"; produce sends no line over {MAX_REQUEST_BYTES >> 20} MiB" if result.refused_by_client else "")
        )
        raise typer.Exit(1)
