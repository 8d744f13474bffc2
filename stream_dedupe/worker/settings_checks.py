"""The bounds of the worker's settings, checked when a :class:`~stream_dedupe.worker.settings.WorkerSettings` is made.

Each message names the setting, the value given and, where it helps, the flag and environment
variable that set it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stream_dedupe.config import ShingleSpec
from stream_dedupe.worker.errors import WorkerConfigError
from stream_dedupe.worker.query_config import check_query
from stream_dedupe.worker.security import check_security

if TYPE_CHECKING:
    from stream_dedupe.worker.settings import WorkerSettings

ENV_PREFIX = "STREAM_DEDUPE_"
#: Smallest ``rocksdb_memory_mb`` (below it the memtables flush every few hundred documents).
MIN_MEMORY_MB = 64
GUARANTEES = ("at_least_once", "exactly_once")
#: Default zstd level of the produced batches (BENCHMARKS.md, "Worker CPU per document, `--jobs`, compression").
ZSTD_LEVEL = 3
#: Most index shards (each is a partition of the shard topics and tables).
MAX_SHARDS = 256
#: Most ``jobs`` (each signing process holds numpy and the kernels: ~75 MB of its own memory, 170 MB of RSS).
MAX_JOBS = 64
COMPRESSIONS = ("zstd", "lz4", "gzip", "snappy", "none")


def check_settings(s: WorkerSettings) -> None:
    """Refuse settings out of their bounds.

    Raises:
        WorkerConfigError: naming the setting, the value and the fix.

    """
    if s.title_guard not in (None, "on", "off"):
        raise WorkerConfigError(f"title_guard must be 'on' or 'off', got {s.title_guard!r}")
    if s.verify not in (None, "exact", "estimate"):
        raise WorkerConfigError(f"verify must be 'exact' or 'estimate', got {s.verify!r}")
    if s.processing_guarantee not in GUARANTEES:
        raise WorkerConfigError(
            f"processing_guarantee {s.processing_guarantee!r} is not supported: use at_least_once or "
            f"exactly_once (set {ENV_PREFIX}PROCESSING_GUARANTEE or --processing-guarantee)"
        )
    if not 0 <= s.jobs <= MAX_JOBS:
        raise WorkerConfigError(
            f"jobs must be between 0 and {MAX_JOBS}, got {s.jobs} (set {ENV_PREFIX}JOBS or --jobs; "
            "1 signs in the worker's own process, 0 uses the usable cores)"
        )
    if not 1 <= s.index_shards <= MAX_SHARDS:
        raise WorkerConfigError(
            f"index_shards must be between 1 and {MAX_SHARDS}, got {s.index_shards} (set "
            f"{ENV_PREFIX}INDEX_SHARDS or --index-shards; 1 keeps the index with the decider)"
        )
    if s.shard_timeout <= 0:
        raise WorkerConfigError(f"shard_timeout must be positive, got {s.shard_timeout}")
    if s.index_shards > 1 and s.query_bind is not None:
        raise WorkerConfigError(
            "the query endpoint (query_bind) is not served with index_shards > 1 yet: unset one of them"
        )
    if s.standby_replicas < 0:
        raise WorkerConfigError(f"standby_replicas must be >= 0, got {s.standby_replicas}")
    if s.input_partitions < 1:
        raise WorkerConfigError(f"input_partitions must be >= 1, got {s.input_partitions}")
    if not 1 <= s.replication_factor <= 32:
        raise WorkerConfigError(
            f"replication_factor must be between 1 and 32, got {s.replication_factor} (set "
            f"{ENV_PREFIX}REPLICATION_FACTOR or --replication-factor; 1 for a single local broker)"
        )
    if s.rocksdb_memory_mb < MIN_MEMORY_MB:
        raise WorkerConfigError(
            f"rocksdb_memory_mb must be at least {MIN_MEMORY_MB}, got {s.rocksdb_memory_mb} (set "
            f"{ENV_PREFIX}ROCKSDB_MEMORY_MB or --rocksdb-memory-mb)"
        )
    if not 0 < s.batch_wait <= 60:
        raise WorkerConfigError(f"batch_wait must be in (0, 60] seconds, got {s.batch_wait}")
    if not 0 < s.heartbeat_interval < s.session_timeout:
        raise WorkerConfigError(
            f"heartbeat_interval ({s.heartbeat_interval}) must be positive and below "
            f"session_timeout ({s.session_timeout})"
        )
    if s.shutdown_timeout <= 0:
        raise WorkerConfigError(f"shutdown_timeout must be positive, got {s.shutdown_timeout}")
    names = {s.input_topic, s.events_topic, s.deduped_topic, s.dlq_topic, s.index_topic}
    if len(names) != 5:
        raise WorkerConfigError("input, events, deduped, dlq and index topic names must all be different")
    s.limits()  # validates batch_size, max_doc_bytes, max_bucket_size
    s.parse_limits()  # max_id_bytes, max_metadata_bytes, max_metadata_fields
    if s.compression_type not in COMPRESSIONS:
        raise WorkerConfigError(
            f"compression_type {s.compression_type!r} is not supported: use one of {', '.join(COMPRESSIONS)}"
        )
    if not 1 <= s.compression_level <= 22:
        raise WorkerConfigError(
            f"compression_level must be between 1 and 22 (zstd), got {s.compression_level} (set "
            f"{ENV_PREFIX}COMPRESSION_LEVEL or --compression-level)"
        )
    if s.dlq_max_payload_bytes < 0 or s.poison_retries < 1:
        raise WorkerConfigError(
            f"dlq_max_payload_bytes must be >= 0 (got {s.dlq_max_payload_bytes}) and poison_retries >= 1 "
            f"(got {s.poison_retries})"
        )
    if s.shingle is not None:
        ShingleSpec.parse(s.shingle)
    check_security(s)  # protocol, mechanism, credentials, secret and certificate files
    check_query(s)  # address, token file, bounds
    s.retention()  # max_age's rules
    if not 1 <= s.expire_interval <= 30 * 86400:  # also refuses nan and inf
        raise WorkerConfigError(
            f"expire_interval must be between 1 and 2592000 seconds (30 days), got {s.expire_interval} "
            f"(set {ENV_PREFIX}EXPIRE_INTERVAL or --expire-interval)"
        )
