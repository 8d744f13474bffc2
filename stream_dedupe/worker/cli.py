"""The ``stream-dedupe worker`` command (``produce`` is in :mod:`stream_dedupe.worker.produce_cli`).

Registered on the main command line in :mod:`stream_dedupe.cli`. Every ``worker`` flag has a
``STREAM_DEDUPE_<NAME>`` environment variable (flag over variable over default).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import threading
from pathlib import Path
from typing import Annotated, Any

import typer

from stream_dedupe.worker.cli_options import (
    Broker,
    DedupedTopic,
    DlqTopic,
    EventsTopic,
    InputPartitions,
    InputTopic,
    SaslMechanism,
    SaslPassword,
    SaslPasswordFile,
    SaslUsername,
    SecurityProtocol,
    SslCafile,
    SslCertfile,
    SslKeyfile,
)
from stream_dedupe.worker.cli_options import opt as _opt
from stream_dedupe.worker.errors import WorkerConfigError
from stream_dedupe.worker.logfilters import RepeatFilter
from stream_dedupe.worker.settings import WorkerSettings, env_var


def worker(
    broker: Broker = None,
    app_id: Annotated[
        str | None, _opt("app_id", "App id = consumer group; names internal topics [default: stream-dedupe].")
    ] = None,
    input_topic: InputTopic = None,
    events_topic: EventsTopic = None,
    deduped_topic: DedupedTopic = None,
    dlq_topic: DlqTopic = None,
    input_partitions: InputPartitions = None,
    replication_factor: Annotated[
        int | None, _opt("replication_factor", "Replicas of the topics it creates; 1: one local broker [default: 3].")
    ] = None,
    state_dir: Annotated[
        Path | None,
        _opt("state_dir", "Local state directory (RocksDB tables) [default: ./stream-dedupe-worker-state]."),
    ] = None,
    rocksdb_memory_mb: Annotated[
        int | None, _opt("rocksdb_memory_mb", "RocksDB block cache + memtables of all tables, MB [default: 256].")
    ] = None,
    threshold: Annotated[float | None, _opt("threshold", "Jaccard threshold [default: state's, else 0.8].")] = None,
    num_perm: Annotated[int | None, _opt("num_perm", "MinHash permutations [default: state's, else 128].")] = None,
    shingle: Annotated[
        str | None, _opt("shingle", "Shingles word:K or char:K [default: state's, else word:3].")
    ] = None,
    boilerplate_min_docs: Annotated[
        int | None,
        _opt(
            "boilerplate_min_docs",
            "Learn lines seen in this many documents of a source (0: off) [default: state's, else 100].",
        ),
    ] = None,
    source_thresholds: Annotated[
        str | None,
        _opt("source_thresholds", "Per-source thresholds SOURCE=T,SOURCE=T (1.0: exact only) [default: none]."),
    ] = None,
    title_guard: Annotated[
        str | None,
        _opt("title_guard", "on/off: documents whose titles differ are never duplicates [default: state's, else on]."),
    ] = None,
    no_title_guard: Annotated[
        bool, typer.Option("--no-title-guard", help="The same as --title-guard off (as dedupe takes it).")
    ] = False,
    no_learn_boilerplate: Annotated[
        bool,
        typer.Option("--no-learn-boilerplate", help="The same as --boilerplate-min-docs 0 (as dedupe takes it)."),
    ] = False,
    verify: Annotated[
        str | None, _opt("verify", "Verification: exact or estimate [default: state's, else exact].")
    ] = None,
    web_host: Annotated[str | None, _opt("web_host", "HTTP bind address [default: 127.0.0.1].")] = None,
    web_port: Annotated[
        int | None, _opt("web_port", "HTTP port for /metrics, /healthz, /readyz [default: 6066].")
    ] = None,
    batch_size: Annotated[int | None, _opt("batch_size", "Records per engine batch [default: 500].")] = None,
    batch_wait: Annotated[
        float | None,
        _opt(
            "batch_wait",
            "Longest wait for an index fetch when nothing is waiting (a batch never waits to fill) [default: 0.05].",
        ),
    ] = None,
    max_doc_bytes: Annotated[
        int | None, _opt("max_doc_bytes", "Larger records go to the DLQ [default: 1 MiB].")
    ] = None,
    max_bucket_size: Annotated[
        int | None,
        _opt("max_bucket_size", "LSH bucket cap: hot buckets stop growing [default: 500]."),
    ] = None,
    processing_guarantee: Annotated[
        str | None, _opt("processing_guarantee", "at_least_once or exactly_once [default: at_least_once].")
    ] = None,
    jobs: Annotated[
        int | None,
        _opt("jobs", "Signing processes, as dedupe --jobs (0: the usable cores, cgroup quota included) [default: 1]."),
    ] = None,
    index_shards: Annotated[
        int | None,
        _opt("index_shards", "Index shards held by the workers of the group (docs/sharding.md) [default: 1]."),
    ] = None,
    shard_timeout: Annotated[
        float | None, _opt("shard_timeout", "Seconds to wait for a shard's answer [default: 60].")
    ] = None,
    standby_replicas: Annotated[
        int | None,
        _opt(
            "standby_replicas",
            "0: none; >= 1: non-deciding workers keep a state copy, and each index shard gets this many "
            "copies on other workers [default: 1].",
        ),
    ] = None,
    session_timeout: Annotated[float | None, _opt("session_timeout", "Broker session timeout, s [default: 6].")] = None,
    heartbeat_interval: Annotated[float | None, _opt("heartbeat_interval", "Heartbeat, s [default: 1].")] = None,
    shutdown_timeout: Annotated[
        float | None, _opt("shutdown_timeout", "SIGTERM: exit after at most this many s [default: 30].")
    ] = None,
    log_level: Annotated[str | None, _opt("log_level", "debug, info, warning, error [default: info].")] = None,
    security_protocol: SecurityProtocol = None,
    sasl_mechanism: SaslMechanism = None,
    sasl_username: SaslUsername = None,
    sasl_password: SaslPassword = None,
    sasl_password_file: SaslPasswordFile = None,
    ssl_cafile: SslCafile = None,
    ssl_certfile: SslCertfile = None,
    ssl_keyfile: SslKeyfile = None,
    compression_type: Annotated[
        str | None, _opt("compression_type", "zstd, lz4, gzip, snappy or none [default: zstd].")
    ] = None,
    compression_level: Annotated[
        int | None, _opt("compression_level", "zstd level, 1 (fastest) to 22 (smallest) [default: 3].")
    ] = None,
    max_id_bytes: Annotated[int | None, _opt("max_id_bytes", "Longer ids are id-too-long [default: 512].")] = None,
    max_metadata_bytes: Annotated[
        int | None, _opt("max_metadata_bytes", "Larger metadata is metadata-too-large [default: 65536].")
    ] = None,
    max_metadata_fields: Annotated[
        int | None, _opt("max_metadata_fields", "More metadata fields: metadata-too-large [default: 1000].")
    ] = None,
    dlq_max_payload_bytes: Annotated[
        int | None, _opt("dlq_max_payload_bytes", "Original bytes a dead letter carries [default: 65536].")
    ] = None,
    poison_retries: Annotated[
        int | None, _opt("poison_retries", "Failures of one record before it is dead-lettered [default: 3].")
    ] = None,
    query_bind: Annotated[
        str | None, _opt("query_bind", "HOST:PORT (or PORT) of the read-only POST /query endpoint [default: off].")
    ] = None,
    query_token_file: Annotated[
        Path | None, _opt("query_token_file", "File holding the bearer token POST /query requires [default: none].")
    ] = None,
    query_max_docs: Annotated[
        int | None, _opt("query_max_docs", "Most documents in one POST /query request [default: 100].")
    ] = None,
    query_max_inflight: Annotated[
        int | None, _opt("query_max_inflight", "Query requests at once; more get 503 [default: 16].")
    ] = None,
    query_timeout: Annotated[
        float | None, _opt("query_timeout", "Seconds a query may wait for the batch in progress [default: 5].")
    ] = None,
    max_age: Annotated[
        str | None,
        _opt(
            "max_age",
            "Retention SOURCE=AGE,SOURCE=AGE (news=7d; =30d: no source): documents updated longer ago "
            "are deleted [default: never].",
        ),
    ] = None,
    expire_interval: Annotated[
        float | None, _opt("expire_interval", "Seconds between two retention sweeps (with --max-age) [default: 600].")
    ] = None,
) -> None:
    """Run the Kafka worker: dedupe the input topic into events, a compacted canonical topic and a DLQ."""
    run_worker(settings_from_flags(locals()))


#: ``dedupe``'s switches the worker takes too, as the worker setting and value they stand for.
_SWITCHES = {"no_title_guard": ("title_guard", "off"), "no_learn_boilerplate": ("boilerplate_min_docs", 0)}


def settings_from_flags(given: dict[str, Any]) -> WorkerSettings:
    """The worker's settings from its command-line flags (None: not given), ``dedupe``'s switches translated.

    Raises:
        WorkerConfigError: a switch contradicts the flag it stands for, or a setting is invalid.

    """
    flags = {k: v for k, v in given.items() if k not in _SWITCHES}
    for switch, (name, value) in _SWITCHES.items():
        if not given.get(switch):
            continue
        if flags.get(name) not in (None, value):
            option, other = "--" + switch.replace("_", "-"), "--" + name.replace("_", "-")
            raise WorkerConfigError(f"{option} and {other} {flags[name]} contradict each other: pass one of them")
        flags[name] = value
    return WorkerSettings.load(**flags)


def run_worker(settings: WorkerSettings) -> None:
    """Create/check the topics (waiting for the broker), then run the Faust worker until SIGTERM/SIGINT.

    Raises:
        StreamDedupeError: when a topic has the wrong layout (the engine's own refusal, e.g. a state
            built with other parameters, exits the process with code 2 and the message).

    """
    from stream_dedupe.worker.app import create_app
    from stream_dedupe.worker.faust_compat import worker_class
    from stream_dedupe.worker.follow import catch_up
    from stream_dedupe.worker.pipeline import stop_sign_stage
    from stream_dedupe.worker.security import describe
    from stream_dedupe.worker.startup_web import serving_while_starting
    from stream_dedupe.worker.topics import prepare_worker_topics

    lock_state_dir(settings.state_dir)  # before any client: a clear one-line error, exit 2
    from stream_dedupe.worker.faust_compat import set_zstd_level

    set_zstd_level(settings.compression_level)
    level = settings.log_level.upper()
    logging.basicConfig(level=level, format="[%(asctime)s] [%(process)d] [%(levelname)s] %(name)s: %(message)s")
    repeats = RepeatFilter(quiet_services=level != "DEBUG")  # Faust's routine service steps at DEBUG only
    for handler in logging.getLogger().handlers:
        handler.addFilter(repeats)
    log = logging.getLogger("stream_dedupe.worker")
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    # /healthz, /readyz and /metrics until the app serves them (stream_dedupe.worker.startup_web)
    with serving_while_starting(loop, settings) as startup:
        waiting = "waiting for the broker if it is down"
        log.info("checking topics on %s (%s; %s)", settings.bootstrap, describe(settings), waiting)
        created = loop.run_until_complete(prepare_worker_topics(settings))
        startup.broker_reached()
        if created:
            log.info("created topics: %s", ", ".join(created))
        built = create_app(settings)
        # Before joining the group: copy what the changelogs hold beyond the local state (a restart,
        # a lost disk) in bulk; Faust's own recovery then reads only the rest (stream_dedupe.worker.follow).
        loop.run_until_complete(catch_up(settings, built.tables))
    # Fewer garbage collections: the worker allocates many short-lived objects per record (Faust
    # events, messages) and few cycles; measured 1.0k -> 1.4k docs/s end to end (bench_worker.py).
    gc.set_threshold(50_000, 20, 100)
    timeout = settings.shutdown_timeout

    stopping: list[asyncio.Task[None]] = []  # held until the process exits

    def on_first_signal(signal: Any) -> None:
        log.info("stopping (signal %s); exiting within %.0fs at most", signal, timeout)
        built.runtime.stopping = True  # /readyz 503 at once, before Faust stops anything
        # The sign stage first: it commits what it forwarded and leaves its group now, so the
        # other workers take its input partitions at once (it left when its session expired).
        stopping.append(loop.create_task(stop_sign_stage(built.runtime)))
        timer = threading.Timer(timeout, _force_exit, args=(timeout,))
        timer.daemon = True
        timer.start()

    class _Worker(worker_class(on_first_signal)):  # type: ignore[misc]
        def on_setup_root_logger(self, logger: Any, level: int) -> None:
            # No terminal spinner: at --log-level warning Faust drew one, and its cursor codes
            # (ESC[?25l) went into log files. A service logs lines.
            self.spinner = None
            # Faust (mode) replaces the root handlers when it starts: filter the new ones too.
            super().on_setup_root_logger(logger, level)
            for handler in logger.handlers:
                if repeats not in handler.filters:
                    handler.addFilter(repeats)

    runner = _Worker(built.app, loop=loop, loglevel=level.lower(), quiet=True)
    runner.execute_from_commandline()


_LOCKS: list[Any] = []  # open lock files: held until the process exits


def lock_state_dir(state_dir: Path) -> None:
    """Create the state directory and lock it for this process (one worker per state directory).

    Raises:
        WorkerConfigError: if the directory's parent does not exist, it cannot be created, or
            another worker holds it.

    """
    import fcntl

    from stream_dedupe.worker.errors import WorkerConfigError

    where = f"{env_var('state_dir')} / --state-dir"
    parent = state_dir.absolute().parent
    if not parent.is_dir():
        raise WorkerConfigError(
            f"the state directory {state_dir} cannot be created: its parent {parent} does not exist (create it, or "
            f"point {where} at an existing directory)"
        )
    try:
        state_dir.mkdir(exist_ok=True)
        lock = open(state_dir / ".worker.lock", "a+")  # noqa: SIM115 - held for the process's life
    except OSError as exc:
        raise WorkerConfigError(f"the state directory {state_dir} is not usable ({exc.strerror}): fix {where}") from exc
    try:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        lock.seek(0)
        holder = lock.read().strip() or "unknown"
        lock.close()
        raise WorkerConfigError(
            f"another worker (pid {holder}) is using the state directory {state_dir}: stop it, or give this worker "
            f"its own directory ({where})"
        ) from None
    lock.truncate(0)
    lock.write(f"{os.getpid()}\n")
    lock.flush()
    _LOCKS.append(lock)


def _force_exit(timeout: float) -> None:
    logging.getLogger("stream_dedupe.worker").error("graceful stop took longer than %.0fs: exiting now", timeout)
    os._exit(3)
