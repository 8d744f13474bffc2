"""Worker settings: one dataclass, read in one place from ``STREAM_DEDUPE_*`` variables and flags.

Precedence: a command-line flag beats its environment variable, which beats the default. Every
field ``name`` maps to the variable ``STREAM_DEDUPE_<NAME>`` (upper case), e.g. ``broker`` ->
``STREAM_DEDUPE_BROKER``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from stream_dedupe.config import DedupeParams, RuntimeLimits
from stream_dedupe.core.records import ParseLimits
from stream_dedupe.core.retention import RetentionPolicy
from stream_dedupe.errors import ConfigError
from stream_dedupe.worker.errors import WorkerConfigError
from stream_dedupe.worker.query_config import parse_bind
from stream_dedupe.worker.security import PATH_SETTINGS, client_security, faust_credentials
from stream_dedupe.worker.settings_checks import ENV_PREFIX, MAX_JOBS, ZSTD_LEVEL, check_settings


@dataclass(frozen=True)
class WorkerSettings:
    """Everything a worker needs; see ``docs/worker.md`` for the table of variables and flags.

    Attributes:
        broker: Kafka bootstrap servers, ``host:port[,host:port]`` (``kafka://`` prefix optional).
        app_id: Faust application id = consumer group; also names the internal topics.
        input_topic: Input documents (key = id, value = JSON, null value = deleted).
        events_topic: One event per input record.
        deduped_topic: Compacted topic of the canonical documents.
        dlq_topic: Records that are not valid documents.
        input_partitions: Partitions of the input topic when the worker creates it.
        replication_factor: Replicas of every topic the worker creates (input, events, deduped, DLQ,
            index, the tables' changelogs); ``min.insync.replicas`` is 2 from 3 replicas on, else 1.
            The worker refuses to start when the cluster has fewer brokers (1 for a single local broker).
        state_dir: Faust data directory (RocksDB tables under ``v1/tables``).
        threshold: Jaccard threshold (None: the state's, else 0.8).
        source_thresholds: Per-source thresholds, ``SOURCE=T,SOURCE=T`` (None: the state's, else none).
        title_guard: ``on``/``off``: documents whose titles differ are never duplicates (None: the
            state's, else on).
        verify: ``exact`` or ``estimate`` verification (None: the state's, else exact).
        num_perm: MinHash permutations (None: the state's, else 128).
        shingle: Shingling ``word:K``/``char:K`` (None: the state's, else ``word:3``).
        boilerplate_min_docs: Learn boilerplate lines seen in this many documents of a source
            (None: the state's setting, else off; 0: off).
        rocksdb_memory_mb: Memory of the RocksDB stores of every table together: one shared block
            cache, the memtables charged to it (see :mod:`stream_dedupe.worker.memory`).
        web_host: Address the HTTP server (metrics, health) binds to.
        web_port: Port of the HTTP server.
        batch_size: Records decided together (one engine batch, one atomic commit).
        batch_wait: Seconds to wait for a batch to fill before deciding a partial one.
        max_doc_bytes: Larger records are invalid (``too-large``) and go to the DLQ.
        max_bucket_size: LSH bucket cap (hot buckets stop growing; a bigger cluster of copies
            still finds its representatives: README, "Clusters bigger than the LSH bucket cap").
        processing_guarantee: ``at_least_once`` (a restart may repeat identical events) or
            ``exactly_once`` (outputs in Kafka transactions: a ``read_committed`` consumer sees one
            event per input record; see docs/worker.md).
        index_shards: Index shards (docs/sharding.md): 1 (the default) keeps the whole index with
            the decider; S >= 2 keeps signatures, shingle sets and band tables in S shards, each
            a partition of ``<app>-shard-requests`` held by one worker of the group, with its own
            changelogged tables. Fixed when the state is created.
        shard_timeout: Seconds the decider waits for a shard's answer before retrying the batch.
        jobs: Processes that sign, as for ``dedupe --jobs``: 1 (the default) signs in the worker's
            own process; N > 1 starts N - 1 signing processes (spawned at start, the compiled
            kernels loaded) and the worker's process keeps the decide stage and the Kafka clients;
            0: the usable cores (the CPU affinity, lowered to the cgroup's CPU quota, a Kubernetes
            ``limits.cpu``). Signing is a small share of a worker's CPU since the compiled shingle
            sets (BENCHMARKS.md, "Worker CPU per document"): more pays only where cores are idle.
        standby_replicas: 0: no standby copy; 1 or more: every worker that does not decide keeps
            a copy of the state, following the changelogs in bulk (stream_dedupe.worker.follow), so
            that it takes the decide stage over in seconds after a failure. With index shards,
            each shard also gets this many copies on workers that do not serve it
            (stream_dedupe.worker.shard_standby).
        session_timeout: Broker session timeout in seconds (how fast a killed worker's
            partitions are reassigned on restart).
        heartbeat_interval: Consumer heartbeat interval in seconds.
        shutdown_timeout: Seconds SIGTERM may take before the process exits anyway.
        log_level: ``debug``, ``info``, ``warning`` or ``error``.
        security_protocol: ``PLAINTEXT``, ``SSL``, ``SASL_PLAINTEXT`` or ``SASL_SSL`` (every Kafka client).
        sasl_mechanism: ``SCRAM-SHA-512``, ``SCRAM-SHA-256`` or ``PLAIN`` (SASL protocols only).
        sasl_username: SASL user (required by the SASL protocols).
        sasl_password: SASL password (prefer ``sasl_password_file``: not shown by ``repr``).
        sasl_password_file: File holding the SASL password (a mounted secret; one trailing newline
            is ignored); wins over ``sasl_password``.
        ssl_cafile: PEM CA bundle the broker certificate is verified with (None: the system CAs).
        ssl_certfile: PEM client certificate for mutual TLS (may also hold the key).
        ssl_keyfile: PEM private key of ``ssl_certfile`` (unencrypted).
        compression_type: Compression of every record the worker produces (``zstd``, ``lz4``,
            ``gzip``, ``snappy`` or ``none``).
        compression_level: zstd level of the produced batches (1 fastest .. 22 smallest; aiokafka
            and the broker default to 3). Only with ``compression_type`` zstd.
        max_id_bytes: Longer ids (JSON ``id`` or Kafka key, UTF-8 bytes) are ``id-too-long``.
        max_metadata_bytes: A larger serialized ``metadata`` object is ``metadata-too-large``.
        max_metadata_fields: A ``metadata`` object with more top-level fields is ``metadata-too-large``.
        dlq_max_payload_bytes: Dead letters carry at most this many bytes of the original record
            (plus its size and SHA-256, and where it is in the input topic).
        poison_retries: A record whose processing fails this many times in a row (an error that is
            not a broker outage) is dead-lettered as ``unprocessable`` instead of stopping the worker.
        query_bind: ``HOST:PORT`` (or ``PORT``: host ``127.0.0.1``) of the read-only ``POST /query``
            endpoint (:mod:`stream_dedupe.worker.query_http`); None (the default): off. Never the
            web (metrics) port.
        query_token_file: File holding the bearer token ``POST /query`` requires (a mounted
            secret; one trailing newline is ignored); None: no token.
        query_max_docs: Most documents one ``POST /query`` request may carry (a JSON list).
        query_max_inflight: Requests answered or waiting at once; more are refused with 503.
        query_timeout: Seconds a request may wait for the decide stage to finish its batch; 503 past it.
        max_age: Retention, ``SOURCE=AGE,SOURCE=AGE`` (``news=7d``; ``=30d``: documents without a
            source): the decider forgets documents whose ``updated_at`` is older, as deletions
            (:mod:`stream_dedupe.worker.retention`). None (the default): documents never expire.
        expire_interval: Seconds between two retention sweeps of the state (with ``max_age``).

    """

    broker: str = "127.0.0.1:9092"
    app_id: str = "stream-dedupe"
    input_topic: str = "crawl.documents"
    events_topic: str = "dedupe.events"
    deduped_topic: str = "crawl.documents.deduped"
    dlq_topic: str = "dedupe.dlq"
    input_partitions: int = 4
    replication_factor: int = 3
    state_dir: Path = field(default_factory=lambda: Path("stream-dedupe-worker-state"))
    threshold: float | None = None
    num_perm: int | None = None
    shingle: str | None = None
    boilerplate_min_docs: int | None = None
    source_thresholds: str | None = None
    title_guard: str | None = None
    verify: str | None = None
    index_shards: int = 1
    shard_timeout: float = 60.0
    rocksdb_memory_mb: int = 256
    web_host: str = "127.0.0.1"
    web_port: int = 6066
    batch_size: int = 500
    batch_wait: float = 0.05
    max_doc_bytes: int = 1 << 20
    max_bucket_size: int = 500
    processing_guarantee: str = "at_least_once"
    jobs: int = 1
    standby_replicas: int = 1
    session_timeout: float = 6.0
    heartbeat_interval: float = 1.0
    shutdown_timeout: float = 30.0
    log_level: str = "info"
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str = "SCRAM-SHA-512"
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    sasl_password_file: Path | None = None
    ssl_cafile: Path | None = None
    ssl_certfile: Path | None = None
    ssl_keyfile: Path | None = None
    compression_type: str = "zstd"
    compression_level: int = ZSTD_LEVEL
    max_id_bytes: int = 512
    max_metadata_bytes: int = 64 << 10
    max_metadata_fields: int = 1000
    dlq_max_payload_bytes: int = 64 << 10
    poison_retries: int = 3
    query_bind: str | None = None
    query_token_file: Path | None = None
    query_max_docs: int = 100
    query_max_inflight: int = 16
    query_timeout: float = 5.0
    max_age: str | None = None
    expire_interval: float = 600.0

    def __post_init__(self) -> None:
        check_settings(self)  # every bound, with the flag and variable that set it

    def retention(self) -> RetentionPolicy | None:
        """The retention policy of ``max_age`` (None: documents never expire).

        Raises:
            WorkerConfigError: if a rule is not ``SOURCE=AGE`` with an age like ``7d``, or a source repeats.

        """
        if self.max_age is None or not self.max_age.strip():
            return None
        try:
            return RetentionPolicy.parse([rule.strip() for rule in self.max_age.split(",")])
        except ConfigError as exc:
            raise WorkerConfigError(f"max_age: {exc} (set {ENV_PREFIX}MAX_AGE or --max-age)") from exc

    @property
    def query_address(self) -> tuple[str, int] | None:
        """``(host, port)`` of the query endpoint (None: off).

        Raises:
            WorkerConfigError: if ``query_bind`` is not ``HOST:PORT``, ``[IPv6]:PORT`` or ``PORT``.

        """
        if self.query_bind is None:
            return None
        return parse_bind(self.query_bind)

    @property
    def exactly_once(self) -> bool:
        """True when outputs are published in Kafka transactions."""
        return self.processing_guarantee == "exactly_once"

    @property
    def min_insync_replicas(self) -> int:
        """``min.insync.replicas`` of the topics the worker creates: 2 from 3 replicas on, else 1."""
        return 2 if self.replication_factor >= 3 else 1

    @property
    def decide_group(self) -> str:
        """The group whose committed offset on the index topic marks the last published batch (exactly_once)."""
        return f"{self.app_id}-decide"

    @property
    def shard_requests_topic(self) -> str:
        """The index shards' calls from the decider (one partition a shard)."""
        return f"{self.app_id}-shard-requests"

    @property
    def shard_replies_topic(self) -> str:
        """The index shards' answers to the decider (one partition)."""
        return f"{self.app_id}-shard-replies"

    @property
    def index_topic(self) -> str:
        """The internal single-partition topic the decide agent consumes."""
        return f"{self.app_id}-index"

    @property
    def bootstrap(self) -> str:
        """Bootstrap servers without the ``kafka://`` scheme (for aiokafka)."""
        return ",".join(s.removeprefix("kafka://") for s in self.broker.split(","))

    @property
    def faust_broker(self) -> str:
        """Bootstrap servers as Faust wants them (``kafka://host:port;...``)."""
        return ";".join(f"kafka://{s}" for s in self.bootstrap.split(","))

    def kafka_security(self) -> dict[str, Any]:
        """Security keyword arguments for every aiokafka client (see :mod:`stream_dedupe.worker.security`)."""
        return client_security(self)

    def faust_credentials(self) -> Any:
        """``broker_credentials`` for ``faust.App`` (None for PLAINTEXT)."""
        return faust_credentials(self)

    def sign_processes(self) -> int:
        """Signing processes to start besides the worker's own (0: the worker signs in-process)."""
        if self.jobs > 0:
            return self.jobs - 1
        from stream_dedupe.sign_pool import usable_cores

        return min(MAX_JOBS, usable_cores()) - 1

    def limits(self) -> RuntimeLimits:
        """The engine's runtime limits."""
        return RuntimeLimits(
            max_doc_bytes=self.max_doc_bytes, max_bucket_size=self.max_bucket_size, batch_size=self.batch_size
        )

    def parse_limits(self, max_doc_bytes: int | None = None) -> ParseLimits:
        """The bounds of a valid input record (``max_doc_bytes`` may be lowered by the topics' limits)."""
        try:
            return ParseLimits(
                max_doc_bytes=max_doc_bytes or self.max_doc_bytes,
                max_id_bytes=self.max_id_bytes,
                max_metadata_bytes=self.max_metadata_bytes,
                max_metadata_fields=self.max_metadata_fields,
            )
        except ValueError as exc:
            raise WorkerConfigError(f"invalid worker setting: {exc}") from exc

    @property
    def producer_compression(self) -> str | None:
        """``compression_type`` for aiokafka (None: no compression)."""
        return None if self.compression_type == "none" else self.compression_type

    def explicit_params(self) -> dict[str, Any]:
        """The index parameters given explicitly (to merge with those stored in the state)."""
        from stream_dedupe.worker.engine_params import explicit_params

        return explicit_params(self)

    def params(self, stored: DedupeParams | None) -> DedupeParams:
        """Parameters for the engine: explicit settings over the stored ones over the defaults."""
        from stream_dedupe.worker.engine_params import engine_params

        return engine_params(self, stored)

    @classmethod
    def load(cls, env: Mapping[str, str] | None = None, **flags: Any) -> WorkerSettings:
        """Read the settings: flags (None = not given) over ``STREAM_DEDUPE_*`` variables over defaults.

        Raises:
            WorkerConfigError: if a variable cannot be parsed or a value is out of range.

        """
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        for f in fields(cls):
            var = ENV_PREFIX + f.name.upper()
            if flags.get(f.name) is not None:
                values[f.name] = flags[f.name]
            elif env.get(var, "") != "":
                values[f.name] = _parse(var, env[var], f.type)
        unknown = set(flags) - {f.name for f in fields(cls)}
        if unknown:
            raise WorkerConfigError(f"unknown worker settings: {sorted(unknown)}")
        for name in ("state_dir", "query_token_file", *PATH_SETTINGS):
            if name in values:
                values[name] = Path(values[name])
        try:
            return cls(**values)
        except WorkerConfigError:
            raise
        except Exception as exc:  # ConfigError from the engine's validation
            raise WorkerConfigError(f"invalid worker setting: {exc}") from exc


def _parse(var: str, text: str, kind: Any) -> Any:
    kind = str(kind)
    try:
        if "float" in kind:
            return float(text)
        if "int" in kind:
            return int(text)
    except ValueError as exc:
        expected = "a number" if "float" in kind else "an integer"
        raise WorkerConfigError(f"{var}={text!r} is not {expected}: fix or unset the variable") from exc
    return text


def env_var(name: str) -> str:
    """The environment variable of a settings field."""
    return ENV_PREFIX + name.upper()
