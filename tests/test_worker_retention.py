"""The worker's retention settings and how its expiry records are batched (the broker side: integration)."""

from __future__ import annotations

from typing import Any


def test_expiry_records_are_decided_in_runs_of_their_own() -> None:
    from types import SimpleNamespace

    from stream_dedupe.worker.retention import EXPIRE_HEADER, first_run

    def msg(offset: int, expiry: bool) -> Any:
        if expiry:
            return SimpleNamespace(offset=offset, value=None, headers=[(EXPIRE_HEADER, b"1")])
        return SimpleNamespace(offset=offset, value=b"{}", headers=[("sd-offset", b"7")])

    kinds = [False, False, True, True, True, False, True]
    messages = [msg(i, e) for i, e in enumerate(kinds)]
    runs = []
    while messages:
        run = first_run(messages)
        runs.append([m.offset for m in run])
        messages = messages[len(run) :]
    assert runs == [[0, 1], [2, 3, 4], [5], [6]]
    assert first_run([]) == []


def test_worker_max_age_is_validated() -> None:
    import pytest

    from stream_dedupe.worker.errors import WorkerConfigError
    from stream_dedupe.worker.settings import WorkerSettings

    policy = WorkerSettings(max_age="news=7d, =30d").retention()
    assert policy is not None and policy.max_age_us == {"news": 7 * 86_400_000_000, "": 30 * 86_400_000_000}
    assert WorkerSettings().retention() is None
    with pytest.raises(WorkerConfigError, match="MAX_AGE"):
        WorkerSettings(max_age="news=7 days")
    with pytest.raises(WorkerConfigError, match="positive age"):
        WorkerSettings(max_age="news=0d")
    with pytest.raises(WorkerConfigError, match="two retention rules"):
        WorkerSettings(max_age="news=7d,news=1d")
    for interval in (0, 0.5, float("nan"), float("inf"), 31 * 86400):
        with pytest.raises(WorkerConfigError, match="expire_interval"):
            WorkerSettings(max_age="news=7d", expire_interval=interval)
    spaced = WorkerSettings(max_age=" news = 7d , = 30d").retention()
    assert spaced is not None and set(spaced.max_age_us) == {"news", ""}  # not "news "


class RecordingProducer:
    """aiokafka's own batch builder; ``send_batch`` records the batch instead of sending it."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, int, list[tuple[bytes, dict[str, bytes]]]]] = []
        self.offset = 0

    def create_batch(self) -> Any:
        from aiokafka.producer.message_accumulator import BatchBuilder

        return BatchBuilder(1 << 20, 0)

    async def send_batch(self, batch: Any, topic: str, *, partition: int) -> Any:
        import asyncio
        from types import SimpleNamespace

        from aiokafka.record.default_records import DefaultRecordBatch

        raw = batch._builder.build()  # the bytes aiokafka would send
        records = [(r.key, dict(r.headers)) for r in DefaultRecordBatch(bytearray(raw))]
        self.sent.append((topic, partition, records))
        future = asyncio.get_running_loop().create_future()
        future.set_result(SimpleNamespace(offset=self.offset))
        self.offset += len(records)
        return future


def test_a_sweep_sends_the_expired_documents_in_steps_of_its_limit() -> None:
    import asyncio
    import time
    from types import SimpleNamespace

    from stream_dedupe.config import DedupeParams
    from stream_dedupe.core.engine import DedupeEngine
    from stream_dedupe.core.retention import RetentionPolicy
    from stream_dedupe.storage.memory import MemoryStore
    from stream_dedupe.worker.retention import EXPIRE_HEADER, RetentionSweeper

    from .helpers import doc

    store = MemoryStore()
    engine = DedupeEngine(DedupeParams(), store)
    engine.process(
        [
            doc(f"d{i}", f"page {i} " + " ".join(f"w{i}x{j}" for j in range(40)), source="news", updated_at=stamp)
            for i, stamp in enumerate(["2020-01-01T00:00:00Z"] * 5 + ["2099-01-01T00:00:00Z"] * 2)
        ]
    )
    engine.commit()
    gate = asyncio.Event()
    producer = RecordingProducer()
    rt = SimpleNamespace(
        engine=engine,
        gate=gate,
        producer=producer,
        index_offset=-1,
        store=SimpleNamespace(scan=store.items),
        settings=SimpleNamespace(index_topic="app-index"),
    )
    sweeper = RetentionSweeper(RetentionPolicy.parse(["news=1d"]), interval=3600, limit=3)

    async def main() -> None:
        gate.set()
        assert await sweeper.tick(rt) == 0  # not due yet: one interval after start
        sweeper.due = time.monotonic()
        assert await sweeper.tick(rt) == 3  # the limit; more follow ...
        assert sweeper.more and await sweeper.tick(rt) == 0  # ... once these are decided
        rt.index_offset = sweeper.sent_until
        assert await sweeper.tick(rt) == 3  # the next step (the first three are not deleted here)
        gate.clear()
        rt.index_offset = sweeper.sent_until
        assert await sweeper.tick(rt) == 0  # not deciding (a rebalance): nothing sent

    asyncio.run(main())
    sent = [record for topic, partition, records in producer.sent for record in records]
    assert {topic for topic, _, _ in producer.sent} == {"app-index"} and {p for _, p, _ in producer.sent} == {0}
    assert [key for key, _ in sent] == [b"d0", b"d1", b"d2", b"d0", b"d1", b"d2"]
    cutoffs = {int(headers[EXPIRE_HEADER]) for _, headers in sent}
    assert all(abs(c - (time.time() - 86_400) * 1e6) < 120e6 for c in cutoffs)  # now - 1 day
