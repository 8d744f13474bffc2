"""Every use of a private (or undocumented) Faust, mode or aiokafka attribute, in one place.

The worker needs a few things that faust-streaming and aiokafka do not offer as public API: table
writes outside Faust's per-event stream, the RocksDB handle of a table, the paused partitions of
Faust's consumer, a shorter fetch wait in the consumers Faust creates, a hook on the first stop
signal, the recovery state, the persisted changelog offsets and a one-shot broker probe. Each is
one function here, and ``tests/test_faust_compat.py`` has a canary per attribute that fails
naming the attribute and the versions below when an upgrade moves it. The rest of the worker
imports these functions and touches no private attribute of those libraries.

Tested with :data:`TESTED`; ``pyproject.toml`` pins the same ranges (upper bounds included).
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping
from importlib import metadata
from typing import Any, cast

#: The versions every function here was tested with (pyproject.toml pins faust-streaming and aiokafka to these minors).
TESTED = {"faust-streaming": "0.15.3", "mode-streaming": "0.7.1", "aiokafka": "0.14.0"}

#: Faust web settings of the worker: no built-in blueprint is served (see docs/worker.md, "Security review").
WEB_SETTINGS: dict[str, Any] = {
    "web_tables_enabled": False,  # /table/<name>/<key>/ would return the stored documents
    "web_router_enabled": False,  # /router/ would return the cluster's topology (every worker's URL)
    "web_stats_enabled": False,  # sensor statistics and /assignment/ (debug only)
    "web_graph_enabled": False,  # /graph/ (debug only)
    "web_metrics_enabled": False,  # /performance/ (Faust's own sensor)
    "web_cors_options": {},  # no cross-origin access from browsers
    "web_in_thread": False,
    "web_transport": "tcp://",
    "debug": False,
}


def versions() -> str:
    """The installed versions of the libraries this module relies on, for error messages."""
    found = []
    for name in TESTED:
        try:
            found.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            found.append(f"{name} (not installed)")
    return ", ".join(found)


# ------------------------------------------------------------------------------------- web ------


def restrict_web(app: Any, allowed: Iterable[str]) -> None:
    """Answer 404 to every HTTP path but ``allowed``, whatever Faust registers.

    The Faust settings in :data:`WEB_SETTINGS` switch off its built-in blueprints; Faust still
    mounts a status page at ``/``, and a later version may add more. An aiohttp middleware on
    Faust's ``web_app`` (the aiohttp ``Application`` of its aiohttp driver) is the one gate.
    """
    from aiohttp import web

    paths = frozenset(allowed)

    @web.middleware
    async def only_allowed(request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        if request.path not in paths:
            raise web.HTTPNotFound()
        if request.method not in ("GET", "HEAD"):
            raise web.HTTPMethodNotAllowed(request.method, ["GET", "HEAD"])
        return await handler(request)

    cast(Any, app.web).web_app.middlewares.append(only_allowed)


# ---------------------------------------------------------------------------------- tables ------


def set_current_event(event: Any) -> None:
    """Make ``event`` Faust's current event (``faust.streams._current_event``).

    Faust only allows table writes while an agent iterates a stream event by event, and writes
    them to the changelog partition of that event; the decide stage works on batches.
    """
    from faust import streams

    cast(Any, streams)._current_event.set(weakref.ref(event))


#: The key under which Faust's RocksDB store keeps a partition's changelog offset, beside the data
#: (faust-streaming 0.15 ``RocksDB.offset_key``); scans of a store's ``Rdict`` skip it.
OFFSET_KEY = b"__faust\0offset__"


def table_db(table: Any, partition: int = 0) -> Any:
    """The ``rocksdict.Rdict`` of one partition of a RocksDB table (``Store._db_for_partition``)."""
    return table.data._db_for_partition(partition)


def persisted_offset(table: Any, topic: str, partition: int = 0) -> int | None:
    """The changelog offset the local store of ``table`` has applied (what Faust's recovery reads)."""
    from faust.types import TP

    offset = table.data.persisted_offset(TP(topic, partition))
    return None if offset is None else int(offset)


def set_persisted_offset(table: Any, topic: str, partition: int, offset: int) -> None:
    """Record that the local store of ``table`` holds the changelog up to ``offset``."""
    from faust.types import TP

    table.data.set_persisted_offset(TP(topic, partition), offset)


def recovery_completed(app: Any) -> bool:
    """True once Faust recovered the tables from their changelogs (``app.tables.recovery.completed``)."""
    return bool(app.tables.recovery.completed.is_set())


def in_recovery(app: Any) -> bool:
    """True while Faust re-reads changelogs (``app.tables.recovery.in_recovery``)."""
    return bool(app.tables.recovery.in_recovery)


# -------------------------------------------------------------------------------- consumers ------


def member_id(app: Any) -> str:
    """The worker's member id in the app's consumer group ("" before it joined).

    ``Consumer._thread._consumer._coordinator.member_id`` (the aiokafka consumer Faust runs in
    its consumer thread); the broker's ``DescribeGroups`` names the members by the same id.
    """
    value = getattr(_coordinator(app), "member_id", "")
    return value if isinstance(value, str) and value != "" else ""


def _coordinator(app: Any) -> Any:
    consumer = getattr(getattr(app.consumer, "_thread", None), "_consumer", None)
    return getattr(consumer, "_coordinator", None)


def track_membership(app: Any) -> None:
    """Record when the broker last confirmed this worker's membership (see :func:`membership_confirmed_at`).

    aiokafka keeps the time of its last successful heartbeat in a local variable of its
    heartbeat routine (``GroupCoordinator._heartbeat_routine``), so ``_do_heartbeat`` is wrapped
    once per coordinator: a heartbeat that succeeds stores when it was *sent* (the broker's
    session timer runs from its arrival, which is later). The routine looks the method up at
    every beat, so a routine already running uses the wrapper from its next beat on.
    """
    coordinator = _coordinator(app)
    if coordinator is None or getattr(coordinator, "_sd_tracked", False):
        return
    inner = coordinator._do_heartbeat

    async def heartbeat() -> Any:
        sent = time.monotonic()
        ok = await inner()
        if ok:
            coordinator._sd_confirmed_at = sent
        return ok

    coordinator._do_heartbeat = heartbeat
    coordinator._sd_tracked = True


def membership_confirmed_at(app: Any) -> float | None:
    """Monotonic time at which the last heartbeat the broker accepted was sent (0.0: none yet).

    None when the group's consumer is not tracked (:func:`track_membership` found no coordinator):
    the caller cannot tell, and must not hold the worker back for it.
    """
    coordinator = _coordinator(app)
    if coordinator is None or not getattr(coordinator, "_sd_tracked", False):
        return None
    return float(getattr(coordinator, "_sd_confirmed_at", 0.0))


def is_paused(consumer: Any, tp: Any) -> bool:
    """True if Faust's consumer has ``tp`` paused (``Consumer._paused_partitions``)."""
    return tp in consumer._paused_partitions


def cap_fetch_wait(ms: int) -> None:
    """Lower the fetch wait of every consumer Faust creates to at most ``ms`` (idempotent).

    Faust has no setting for aiokafka's ``fetch_max_wait_ms`` (500 ms): this wraps
    ``AIOKafkaConsumerThread._create_worker_consumer`` and lowers the consumer's
    ``_fetch_max_wait_ms`` (read when aiokafka builds its fetcher, at ``start``).
    """
    from faust.transport.drivers import aiokafka as driver

    cls = cast(Any, driver.AIOKafkaConsumerThread)
    if getattr(cls, "_sd_fetch_wait_ms", None) == ms:
        return
    create = getattr(cls, "_sd_original_create", None) or cls._create_worker_consumer

    def create_capped(self: Any, *args: Any, **kwargs: Any) -> Any:
        consumer = create(self, *args, **kwargs)
        consumer._fetch_max_wait_ms = min(consumer._fetch_max_wait_ms, ms)
        return consumer

    cls._sd_original_create = create
    cls._create_worker_consumer = create_capped
    cls._sd_fetch_wait_ms = ms


#: Longest wait after failed metadata updates in a row (:func:`throttle_metadata_retries`).
MAX_METADATA_BACKOFF_S = 1.0


def throttle_metadata_retries() -> None:
    """Wait between failed metadata updates of every aiokafka client of this process (idempotent).

    aiokafka 0.14's producer asks for a metadata update whenever a partition it has batches for
    has no known leader, and the client's ``_md_synchronizer`` answers a failed update at once:
    with the broker down and sends pending, the two loop on refused connections (measured: ~3,600
    a second and 85% of a core in a plain ``AIOKafkaProducer``, 90% in a worker; the fix,
    aio-libs/aiokafka#1014, is not released). This wraps ``AIOKafkaClient._metadata_update``: a
    failed update returns after the client's ``retry_backoff_ms``, doubled at every failure in a
    row up to :data:`MAX_METADATA_BACKOFF_S`; a success resets it.
    """
    import asyncio

    from aiokafka.client import AIOKafkaClient  # type: ignore[import-untyped]

    cls = cast(Any, AIOKafkaClient)
    if getattr(cls, "_sd_metadata_throttled", False):
        return
    update = cls._metadata_update

    async def throttled(self: Any, cluster_metadata: Any, topics: Any) -> Any:
        ok = await update(self, cluster_metadata, topics)
        if ok:
            self._sd_metadata_failures = 0
            return ok
        failures = getattr(self, "_sd_metadata_failures", 0)
        self._sd_metadata_failures = failures + 1
        await asyncio.sleep(min(self._retry_backoff * 2**failures, MAX_METADATA_BACKOFF_S))
        return ok

    cls._metadata_update = throttled
    cls._sd_metadata_throttled = True


def fetch_max_wait_ms(consumer: Any) -> int:
    """The fetch wait of an aiokafka consumer (``AIOKafkaConsumer._fetch_max_wait_ms``)."""
    return int(consumer._fetch_max_wait_ms)


# ---------------------------------------------------------------------------------- worker ------


def worker_class(on_first_signal: Callable[[Any], None]) -> type[Any]:
    """A ``faust.worker.Worker`` that calls ``on_first_signal(signal)`` on the first SIGTERM/SIGINT.

    mode's ``Worker._schedule_shutdown`` runs for every stop signal and sets
    ``_signal_stop_time`` on the first one.
    """
    from faust.worker import Worker

    class _Worker(Worker):
        def _schedule_shutdown(self, signal: Any) -> None:
            if not self._signal_stop_time:
                on_first_signal(signal)
            super()._schedule_shutdown(signal)

    return _Worker


# ---------------------------------------------------------------------------------- aiokafka ----


async def probe_metadata(host: str, port: int, timeout_ms: int, security: Mapping[str, Any]) -> None:
    """Open one connection with the client settings ``security`` and ask for metadata, then close it.

    aiokafka's ``conn.create_conn`` and ``MetadataRequest`` (not exported by ``aiokafka``): the
    handshake errors they raise tell a refused credential from an unreachable broker.

    Raises:
        KafkaError: the broker refused the handshake (SASL, TLS) or the request.
        OSError: the connection failed.

    """
    from aiokafka.conn import create_conn  # type: ignore[import-untyped]
    from aiokafka.protocol.metadata import MetadataRequest  # type: ignore[import-untyped]

    conn = await create_conn(host, port, request_timeout_ms=timeout_ms, **security)
    try:
        await conn.send(MetadataRequest([]))
    finally:
        conn.close()


# --------------------------------------------------------------------------------- RocksDB ------


def bounded_rocksdb_options(make_options: Callable[[], Any]) -> Any:
    """Faust ``RocksDBOptions`` whose ``as_options`` returns ``make_options()``.

    Faust (``faust.stores.rocksdb.RocksDBOptions``) gives every table its own 2 GiB block cache
    and three 64 MB memtables, and builds the rocksdict ``Options`` in ``as_options`` (called by
    ``open`` for each partition): overriding it opens the store with the worker's options
    (:mod:`stream_dedupe.worker.memory`).
    """
    from faust.stores.rocksdb import RocksDBOptions

    class _Bounded(RocksDBOptions):
        def as_options(self) -> Any:
            return make_options()

    return _Bounded(use_rocksdict=True)


def set_table_options(tables: Mapping[str, Any], options: Mapping[str, Any]) -> None:
    """Give each table's RocksDB store its ``RocksDBOptions`` (``Store.rocksdb_options``) before it opens.

    Raises:
        RuntimeError: if a table's store has a partition open already (``Store._dbs``).

    """
    for namespace, table in tables.items():
        store = table.data
        if store._dbs:
            raise RuntimeError(f"table {namespace!r}: its RocksDB store is already open; set options before")
        store.rocksdb_options = options[namespace]


#: zstd level aiokafka compresses with (its own default: 3, the broker's; it has no setting for it).
_ZSTD_LEVEL: list[int] = [3]


def set_zstd_level(level: int) -> None:
    """Make every aiokafka producer of this process compress zstd batches at ``level``.

    aiokafka 0.14 calls ``aiokafka.codec.zstd_encode(data)`` without a level from both record
    batch builders (the Cython one in ``aiokafka.record._crecords.default_records`` and the
    pure-Python fallback), which look the name up in their module globals at call time: both are
    pointed at one wrapper that passes the level.
    """
    from aiokafka import codec  # type: ignore[import-untyped]
    from aiokafka.record import default_records  # type: ignore[import-untyped]

    _ZSTD_LEVEL[0] = level
    original = getattr(codec, "_stream_dedupe_original_zstd", codec.zstd_encode)
    codec._stream_dedupe_original_zstd = original

    def encode(payload: Any, level: int | None = None) -> bytes:
        return cast(bytes, original(payload, level=_ZSTD_LEVEL[0] if level is None else level))

    modules = [default_records]
    try:
        from aiokafka.record._crecords import default_records as cython_records  # type: ignore[import-untyped]

        modules.append(cython_records)
    except ImportError:  # pragma: no cover - AIOKAFKA_NO_EXTENSIONS or a platform without wheels
        pass
    for module in modules:
        if not hasattr(module, "zstd_encode"):
            raise RuntimeError(f"{module.__name__}.zstd_encode is gone ({versions()}): update set_zstd_level")
        module.zstd_encode = encode
