"""Canaries for every private Faust, mode and aiokafka attribute the worker uses (worker/faust_compat.py).

Each test exercises one attribute on the installed libraries (real Faust app, real RocksDB store,
real aiokafka clients; no broker needed) and fails with a message naming the attribute and the
versions tested, so that an upgrade that moves one is caught here rather than in production.
"""

from __future__ import annotations

import asyncio
import inspect
import re
import tomllib
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from stream_dedupe.worker import faust_compat

ROOT = Path(__file__).resolve().parents[1]


def canary(ok: object, attribute: str, detail: str = "") -> None:
    if not ok:
        pytest.fail(
            f"{attribute}: {detail or 'missing or changed'}. stream_dedupe/worker/faust_compat.py relies on it "
            f"(tested with {faust_compat.TESTED}; installed: {faust_compat.versions()}): adapt faust_compat.py "
            "to the new version, or install the tested versions (constraints.txt)",
            pytrace=False,
        )


@pytest.fixture
def app(tmp_path: Path) -> Iterator[Any]:
    import faust

    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    app = faust.App(
        "compat-canary",
        broker="kafka://127.0.0.1:1",
        datadir=str(tmp_path),
        store="rocksdb://",
        autodiscover=False,
        web_enabled=True,
        **faust_compat.WEB_SETTINGS,
    )
    yield app
    loop.close()
    asyncio.set_event_loop(None)


@pytest.fixture
def tables(app: Any) -> dict[str, Any]:
    return {
        ns: app.Table(f"state-{ns}", default=None, key_type=bytes, value_type=bytes, partitions=1)
        for ns in ("docs", "sigs")
    }


def test_installed_versions_are_the_tested_ones_and_within_the_pins() -> None:
    pins = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    for name, tested in faust_compat.TESTED.items():
        installed = metadata.version(name)
        canary(installed == tested, f"{name} {installed}", f"faust_compat.TESTED says {tested}")
        pin = next((p for p in pins if re.match(rf"{re.escape(name)}\b", p)), None)
        if name != "mode-streaming":  # comes with faust-streaming
            assert pin is not None and "<" in pin, f"pyproject.toml must pin {name} with an upper bound: {pin}"


def test_streams_current_event_context_variable() -> None:
    from contextvars import ContextVar

    from faust import streams

    var = getattr(streams, "_current_event", None)
    canary(isinstance(var, ContextVar), "faust.streams._current_event", "not a ContextVar")

    class Event:
        pass

    event = Event()
    faust_compat.set_current_event(event)
    canary(streams.current_event() is event, "faust.streams._current_event", "current_event() does not read it")


def test_rocksdb_store_handle_persisted_offsets_and_options(app: Any, tables: dict[str, Any], tmp_path: Path) -> None:
    from faust.stores.rocksdb import RocksDBOptions, Store
    from rocksdict import Rdict

    from stream_dedupe.worker.memory import bound_tables

    canary(hasattr(Store, "_db_for_partition"), "faust.stores.rocksdb.Store._db_for_partition")
    canary("as_options" in inspect.getsource(RocksDBOptions.open), "RocksDBOptions.open", "no longer calls as_options")
    canary(isinstance(tables["docs"].data._dbs, dict), "faust.stores.rocksdb.Store._dbs", "not a dict")
    sizes = bound_tables(tables, 64)
    canary(isinstance(tables["docs"].data.rocksdb_options, RocksDBOptions), "Store.rocksdb_options")
    db = faust_compat.table_db(tables["docs"])
    canary(isinstance(db, Rdict), "Store._db_for_partition(0)", f"returned {type(db)}")
    db[b"k"] = b"v"
    canary(db[b"k"] == b"v", "Store._db_for_partition(0)", "raw bytes keys and values")
    assert sizes["docs"] == 8 << 20  # a 64 MB budget: 32 MB of memtables, at most a quarter of it per table
    topic = tables["docs"].changelog_topic_name
    canary(topic == "compat-canary-state-docs-changelog", "Table.changelog_topic_name", topic)
    canary(faust_compat.persisted_offset(tables["docs"], topic) is None, "Store.persisted_offset", "not None when new")
    faust_compat.set_persisted_offset(tables["docs"], topic, 0, 41)
    canary(faust_compat.persisted_offset(tables["docs"], topic) == 41, "Store.set_persisted_offset/persisted_offset")
    canary(Store.offset_key == faust_compat.OFFSET_KEY, "faust.stores.rocksdb.Store.offset_key", repr(Store.offset_key))
    canary(db[faust_compat.OFFSET_KEY] == b"41", "RocksDB.set_persisted_offset", "not stored under offset_key")
    with pytest.raises(RuntimeError, match="already open"):
        bound_tables(tables, 64)


def test_consumer_paused_partitions(app: Any) -> None:
    from faust.types import TP

    consumer = app.consumer
    canary(isinstance(getattr(consumer, "_paused_partitions", None), set), "faust Consumer._paused_partitions")
    tp = TP("t", 0)
    assert not faust_compat.is_paused(consumer, tp)
    consumer._paused_partitions.add(tp)
    assert faust_compat.is_paused(consumer, tp)


def test_consumer_group_member_id(app: Any) -> None:
    from aiokafka import AIOKafkaConsumer
    from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread

    thread = getattr(app.consumer, "_thread", None)
    canary(isinstance(thread, AIOKafkaConsumerThread), "faust Consumer._thread (AIOKafkaConsumerThread)")
    canary("self._consumer = " in inspect.getsource(AIOKafkaConsumerThread), "AIOKafkaConsumerThread._consumer")
    assert faust_compat.member_id(app) == ""  # not joined yet

    async def joined_member_id() -> str:  # a real aiokafka consumer, its coordinator given an id
        consumer = AIOKafkaConsumer(bootstrap_servers="127.0.0.1:9", group_id="g")
        canary("self._coordinator = " in inspect.getsource(AIOKafkaConsumer), "AIOKafkaConsumer._coordinator")
        from aiokafka.consumer.group_coordinator import GroupCoordinator

        canary("self.member_id = " in inspect.getsource(GroupCoordinator.__init__), "GroupCoordinator.member_id")
        thread._consumer = consumer
        consumer._coordinator = type("C", (), {"member_id": "faust-0.15.3-m1"})()
        return faust_compat.member_id(app)

    assert asyncio.run(joined_member_id()) == "faust-0.15.3-m1"


def test_fetch_wait_patch_of_the_consumer_thread() -> None:
    from aiokafka import AIOKafkaConsumer
    from faust.transport.drivers import aiokafka as driver

    create = getattr(driver.AIOKafkaConsumerThread, "_create_worker_consumer", None)
    canary(callable(create), "faust AIOKafkaConsumerThread._create_worker_consumer")
    # an earlier test in this process (a worker) may have patched it already: compare with the original
    original = getattr(driver.AIOKafkaConsumerThread, "_sd_original_create", create)
    params = list(inspect.signature(original).parameters)
    canary(params == ["self", "transport"], "AIOKafkaConsumerThread._create_worker_consumer", f"signature {params}")
    canary("_fetch_max_wait_ms" in inspect.getsource(AIOKafkaConsumer.start), "AIOKafkaConsumer.start", "fetch wait")

    async def build() -> int:
        consumer = AIOKafkaConsumer(bootstrap_servers="127.0.0.1:1", fetch_max_wait_ms=321)
        return faust_compat.fetch_max_wait_ms(consumer)

    canary(asyncio.run(build()) == 321, "aiokafka AIOKafkaConsumer._fetch_max_wait_ms")
    faust_compat.cap_fetch_wait(50)
    faust_compat.cap_fetch_wait(50)  # idempotent: one wrapper
    patched = driver.AIOKafkaConsumerThread._create_worker_consumer
    assert patched.__name__ == "create_capped" and driver.AIOKafkaConsumerThread._sd_original_create is original


def test_metadata_retry_throttle_wraps_the_client_update() -> None:
    from aiokafka.client import AIOKafkaClient

    update = getattr(AIOKafkaClient, "_metadata_update", None)
    canary(inspect.iscoroutinefunction(update), "aiokafka AIOKafkaClient._metadata_update")
    params = list(inspect.signature(update).parameters)  # type: ignore[arg-type]
    canary(params == ["self", "cluster_metadata", "topics"], "AIOKafkaClient._metadata_update", f"signature {params}")
    canary(
        "await self._metadata_update(" in inspect.getsource(AIOKafkaClient._md_synchronizer),
        "AIOKafkaClient._md_synchronizer",
        "no longer awaits _metadata_update",
    )

    async def backoff() -> float:
        client = AIOKafkaClient(bootstrap_servers="127.0.0.1:1", retry_backoff_ms=40)
        return float(client._retry_backoff)

    canary(asyncio.run(backoff()) == 0.04, "aiokafka AIOKafkaClient._retry_backoff")
    faust_compat.throttle_metadata_retries()
    faust_compat.throttle_metadata_retries()  # idempotent: one wrapper
    assert AIOKafkaClient._metadata_update.__name__ == "throttled"

    async def failed_updates() -> tuple[list[bool], float]:
        # no broker known and no bootstrap connection: every update fails, after a growing wait
        client = AIOKafkaClient(bootstrap_servers="127.0.0.1:1", retry_backoff_ms=40)
        start = asyncio.get_running_loop().time()
        results = [await client._metadata_update(client.cluster, set()) for _ in range(3)]
        return results, asyncio.get_running_loop().time() - start

    results, took = asyncio.run(failed_updates())
    assert results == [False, False, False] and took >= 0.04 + 0.08 + 0.16


def test_worker_first_signal_hook() -> None:
    from mode.worker import Worker as ModeWorker

    canary(hasattr(ModeWorker, "_schedule_shutdown"), "mode.Worker._schedule_shutdown")
    source = inspect.getsource(ModeWorker._schedule_shutdown)
    canary("_signal_stop_time" in source, "mode.Worker._signal_stop_time", "no longer set by _schedule_shutdown")
    canary(ModeWorker._signal_stop_time is None, "mode.Worker._signal_stop_time", "default not None")
    cls = faust_compat.worker_class(lambda signal: None)
    assert "_schedule_shutdown" in cls.__dict__


def test_recovery_flags(app: Any, tables: dict[str, Any]) -> None:
    recovery = app.tables.recovery
    canary(hasattr(recovery.completed, "is_set"), "app.tables.recovery.completed", "not an Event")
    canary(isinstance(recovery.in_recovery, bool), "app.tables.recovery.in_recovery")
    assert not faust_compat.recovery_completed(app) and not faust_compat.in_recovery(app)


def test_web_settings_and_the_aiohttp_application(app: Any) -> None:
    from aiohttp import web
    from faust.web import base

    for name, value in faust_compat.WEB_SETTINGS.items():
        got = getattr(app.conf, name)
        same = str(got).rstrip(":/") == str(value).rstrip(":/")
        canary(same, f"faust setting {name}", f"{got!r} instead of {value!r}")
    flags = set(base.BLUEPRINT_FLAGS.values())
    for name in ("web_tables_enabled", "web_router_enabled", "web_stats_enabled", "web_graph_enabled"):
        canary(name in flags, f"faust.web.base.BLUEPRINT_FLAGS[{name}]", "no longer switches a blueprint")
    enabled = [str(bp) for _, bp in app.web.blueprints._enabled]
    canary(not any("tables" in bp or "router" in bp for bp in enabled), "faust web blueprints", f"{enabled}")
    canary(isinstance(getattr(app.web, "web_app", None), web.Application), "faust aiohttp Web.web_app")
    faust_compat.restrict_web(app, ["/metrics"])
    assert len(app.web.web_app.middlewares) == 1


def test_aiokafka_probe_helpers() -> None:
    from aiokafka.conn import create_conn
    from aiokafka.protocol.metadata import MetadataRequest

    params = inspect.signature(create_conn).parameters
    canary("request_timeout_ms" in params and "security_protocol" in params, "aiokafka.conn.create_conn")
    canary(MetadataRequest([]) is not None, "aiokafka.protocol.metadata.MetadataRequest([])")

    async def refused() -> None:
        await faust_compat.probe_metadata("127.0.0.1", 1, 1000, {})

    with pytest.raises((OSError, Exception)):
        asyncio.run(refused())


def test_zstd_level_reaches_both_record_batch_builders() -> None:
    """aiokafka.record[._crecords].default_records.zstd_encode: set_zstd_level points both at one wrapper."""
    from aiokafka import codec
    from aiokafka.record import default_records
    from aiokafka.record._crecords import default_records as cython_records

    lines = [
        b'{"id": "doc-%d", "text": "the quick brown fox %d jumps over the lazy dog %d"}' % (i, i * 7, i % 13)
        for i in range(3000)
    ]

    def built(builder_class: Any) -> bytes:
        builder = builder_class(
            magic=2,
            compression_type=4,
            is_transactional=0,
            producer_id=-1,
            producer_epoch=-1,
            base_sequence=-1,
            batch_size=1 << 22,
        )
        for offset, line in enumerate(lines):
            builder.append(offset, timestamp=0, key=None, value=line, headers=[])
        return bytes(builder.build())

    builders = {
        "cython": cython_records.DefaultRecordBatchBuilder,
        "python": default_records._DefaultRecordBatchBuilderPy,
    }
    try:
        sizes = {}
        for level in (1, 19):
            faust_compat.set_zstd_level(level)
            sizes[level] = {name: len(built(cls)) for name, cls in builders.items()}
        for name in builders:
            canary(sizes[19][name] < sizes[1][name], f"{name} DefaultRecordBatchBuilder zstd level", str(sizes))
        assert codec.zstd_decode(codec.zstd_encode(b"x" * 1000)) == b"x" * 1000
    finally:
        faust_compat.set_zstd_level(3)


def test_the_decider_store_opens_every_table_before_its_first_batch(tables: dict[str, Any], tmp_path: Path) -> None:
    from stream_dedupe.worker.store import FaustTableStore

    store = FaustTableStore(tables, tmp_path / "journal", namespaces=tuple(tables))
    canary(not any(t.data._dbs for t in tables.values()), "faust.stores.rocksdb.Store._dbs", "opened before first use")
    store.open_tables()
    assert all(0 in t.data._dbs for t in tables.values())


def test_a_worker_whose_consumer_has_not_started_owns_no_index_partition(app: Any) -> None:
    """/readyz asks owns_index from the first moment the web port answers, before Faust's consumer runs."""
    from types import SimpleNamespace

    import faust.exceptions

    from stream_dedupe.worker.pipeline import owns_index

    with pytest.raises(faust.exceptions.ConsumerNotStarted):
        app.consumer.assignment()  # what owns_index used to let escape (a 500 and a traceback per probe)
    runtime = SimpleNamespace(settings=SimpleNamespace(index_topic="compat-canary-index"))
    assert owns_index(app, runtime) is False  # type: ignore[arg-type]
