"""Kafka's own consumer-group offsets show the worker's progress, for lag exporters.

An SRE's kafka-lag-exporter, Burrow or KEDA scaler reads committed group offsets, not the
worker's metrics. The sign stage commits ``<app_id>-sign``'s offsets on the input topic; the
decide stage (whose position lives in its state) now commits ``<app_id>-decide``'s offset on the
index topic in ``at_least_once`` too. The committed offset is a report: a worker restarted with
it moved back still decides from its state (no record decided twice).
"""

from __future__ import annotations

import time
from typing import Any

import orjson
from confluent_kafka import Consumer, TopicPartition

from tests.integration.conftest import Broker, Names, consume, document_events, n_document_events, produce


def doc(i: int) -> bytes:
    words = " ".join(f"w{(i * 7 + j) % 499}" for j in range(50))
    return orjson.dumps({"id": f"d{i}", "text": f"document {i} {words}"})


def group_lag(bootstrap: str, group: str, topic: str) -> tuple[list[int | None], list[int]]:
    """(committed offsets, high watermarks) of every partition of ``topic`` for ``group``."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        parts = c.list_topics(topic, timeout=10).topics[topic].partitions
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        committed = [tp.offset if tp.offset >= 0 else None for tp in c.committed(tps, timeout=10)]
        highs = [c.get_watermark_offsets(tp, timeout=10)[1] for tp in tps]
        return committed, highs
    finally:
        c.close()


def wait_caught_up(bootstrap: str, group: str, topic: str, timeout: float = 30) -> list[int]:
    deadline = time.monotonic() + timeout
    while True:
        committed, highs = group_lag(bootstrap, group, topic)
        if committed == highs:
            return highs
        assert time.monotonic() < deadline, f"{group} on {topic}: committed {committed}, end {highs}"
        time.sleep(0.5)


def set_offset(bootstrap: str, group: str, topic: str, offset: int) -> None:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    finally:
        c.close()


def test_decide_and_sign_groups_commit_what_was_decided(broker: Broker, names: Names, workers: Any) -> None:
    index, decide_group = f"{names.app_id}-index", f"{names.app_id}-decide"
    w = workers().start()
    w.wait_ready()
    produce(broker.bootstrap, names.input, [(f"d{i}".encode(), doc(i)) for i in range(40)])
    consume(broker.bootstrap, names.events, until=n_document_events(40), timeout=90)

    # both groups caught up: every input record forwarded, every forwarded record decided
    assert sum(wait_caught_up(broker.bootstrap, f"{names.app_id}-sign", names.input)) == 40
    (first_end,) = wait_caught_up(broker.bootstrap, decide_group, index)
    assert first_end >= 40

    produce(broker.bootstrap, names.input, [(f"d{i}".encode(), doc(i)) for i in range(40, 60)])
    consume(broker.bootstrap, names.events, until=n_document_events(60), timeout=90)
    (second_end,) = wait_caught_up(broker.bootstrap, decide_group, index)
    assert second_end >= first_end + 20
    assert w.stop() == 0

    # the offset is never read back: moved to 0, the restarted worker decides from its state
    set_offset(broker.bootstrap, decide_group, index, 0)
    w.start()
    w.wait_ready()
    produce(broker.bootstrap, names.input, [(f"d{i}".encode(), doc(i)) for i in range(60, 65)])
    events = document_events(consume(broker.bootstrap, names.events, until=n_document_events(65), timeout=90))
    assert sorted(e["id"] for e in events) == sorted(f"d{i}" for i in range(65))  # none decided twice
    (third_end,) = wait_caught_up(broker.bootstrap, decide_group, index)
    assert third_end >= second_end + 5


def test_exactly_once_ignores_a_decide_group_reset_by_hand(broker: Broker, names: Names, workers: Any) -> None:
    """An operator's ``--reset-offsets --to-latest`` on the decide group must not drop outputs.

    exactly_once reads the group's offset at start (records below it were published by a
    transaction whose state was not written: decided again without publishing). A crash leaves it
    at most one batch ahead of the state; further ahead it was moved by hand, and trusting it lost
    every record in between (958 in an outside walk-through). It is ignored, with an error.
    """
    from confluent_kafka import Producer

    index, decide_group = f"{names.app_id}-index", f"{names.app_id}-decide"
    w = workers(extra=["--processing-guarantee", "exactly_once"]).start()
    w.wait_ready()
    produce(broker.bootstrap, names.input, [(f"d{i}".encode(), doc(i)) for i in range(10)])
    consume(broker.bootstrap, names.events, until=n_document_events(10), timeout=90, isolation="read_committed")
    assert w.stop() == 0

    # 600 records wait in the index (more than one batch of 500), and the group is moved past them
    backlog = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(10, 610):
        backlog.produce(index, key=f"d{i}".encode(), value=doc(i))
    assert backlog.flush(10) == 0
    (end,) = group_lag(broker.bootstrap, decide_group, index)[1]
    set_offset(broker.bootstrap, decide_group, index, end)

    w.start()
    w.wait_ready()
    events = document_events(
        consume(broker.bootstrap, names.events, until=n_document_events(610), timeout=120, isolation="read_committed")
    )
    assert sorted(e["id"] for e in events) == sorted(f"d{i}" for i in range(610))  # every one published, once
    assert "it was moved by hand; ignoring it" in w.log()
    assert "without publishing" not in w.log()


def sign_members(bootstrap: str, group: str) -> int:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    (future,) = admin.describe_consumer_groups([group], request_timeout=10).values()
    return len(future.result(timeout=10).members)


def test_a_stopping_worker_leaves_the_sign_group_at_once(
    broker: Broker, names: Names, workers: Any, tmp_path: Any
) -> None:
    """A rolling update must not leave input partitions unsigned for a session timeout per pod.

    The sign stage's consumer left ``<app_id>-sign`` only when its session expired (~6 s): the
    process exited before the stage's consumer said goodbye.
    """
    import signal

    first = workers(state_dir=tmp_path / "a").start()
    first.wait_ready()
    second = workers(state_dir=tmp_path / "b").start()
    second.wait_ready()
    group = f"{names.app_id}-sign"
    deadline = time.monotonic() + 60
    while sign_members(broker.bootstrap, group) != 2:
        assert time.monotonic() < deadline, "both workers never joined the sign group"
        time.sleep(0.3)
    assert second.proc is not None
    second.proc.send_signal(signal.SIGTERM)
    signalled = time.monotonic()
    while sign_members(broker.bootstrap, group) != 1:
        assert time.monotonic() - signalled < 30, "the stopped worker never left the sign group"
        time.sleep(0.1)
    left_after = time.monotonic() - signalled
    assert second.proc.wait(40) == 0
    assert left_after < 3.0, f"left the sign group {left_after:.1f}s after SIGTERM (session timeout: 6 s)"
    # the survivor signs every partition: records sent now are decided
    produce(broker.bootstrap, names.input, [(f"d{i}".encode(), doc(i)) for i in range(30)])
    consume(broker.bootstrap, names.events, until=n_document_events(30), timeout=60)
