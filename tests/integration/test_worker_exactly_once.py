"""processing_guarantee=exactly_once: kill -9 mid-stream, restart, one committed event per input."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest

from stream_dedupe.exports import iter_canonical_documents
from tests.integration.conftest import (
    DOCUMENT_EVENTS,
    Broker,
    Msg,
    Names,
    cluster_sets,
    consume,
    n_document_events,
    oracle,
    produce,
    replay_compacted,
    worker_state,
)
from tests.integration.test_worker_e2e import decision_order, synth_docs

N = 3000


def test_kill9_mid_stream_leaves_exactly_one_committed_event_per_input(
    broker: Broker, names: Names, workers: Any
) -> None:
    docs = synth_docs(N, seed=31)
    w = workers(extra=["--batch-size", "50", "--processing-guarantee", "exactly_once"], log_name="eos")
    w.start()
    w.wait_ready()
    produce(broker.bootstrap, names.input, [(orjson.loads(d)["id"].encode(), d) for d in docs])

    for target in (700, 1900):  # two kill -9s mid-stream (read_uncommitted: aborted records count too)
        consume(broker.bootstrap, names.events, until=n_document_events(target), timeout=120, idle=0)
        w.kill9()
        time.sleep(0.3)
        w.start()
        w.wait_ready(90)
    committed = consume(
        broker.bootstrap, names.events, until=n_document_events(N), timeout=240, isolation="read_committed"
    )
    assert w.stop() == 0
    everything = consume(broker.bootstrap, names.events)  # read_uncommitted: aborted records too

    expected_store = assert_exactly_once(committed, docs, w.state_dir)
    # Whether a kill cut a transaction short depends on timing: the tests below inject both cases.
    replayed = w.log().count("without publishing")
    print(f"events written {len(everything)}, committed {len(committed)}, silent replays {replayed}")
    deduped = replay_compacted(consume(broker.bootstrap, names.deduped, isolation="read_committed"))
    assert set(deduped.values()) == set(iter_canonical_documents(expected_store))


@pytest.mark.parametrize(
    ("fault", "replays"),
    [
        ("before-commit:8", False),  # outputs written in an open transaction, then death: aborted
        ("after-publish:8", True),  # transaction committed, state not: decided again silently
    ],
)
def test_death_at_each_point_of_a_transaction(
    broker: Broker, names: Names, workers: Any, fault: str, replays: bool
) -> None:
    """The windows a kill -9 only hits by chance, hit exactly by fault injection."""
    docs = synth_docs(1500, seed=32)
    w = workers(extra=["--batch-size", "50", "--processing-guarantee", "exactly_once"], log_name="fault")
    w.env = {"STREAM_DEDUPE_FAULT": fault}
    w.start()
    w.wait_ready()
    produce(broker.bootstrap, names.input, [(orjson.loads(d)["id"].encode(), d) for d in docs])
    assert w.proc is not None and w.proc.wait(120) == 86, w.log()[-3000:]  # died at the 8th transaction
    w.env = {}
    w.start()
    w.wait_ready(90)
    committed = consume(
        broker.bootstrap, names.events, until=n_document_events(1500), timeout=240, isolation="read_committed"
    )
    assert w.stop() == 0
    everything = consume(broker.bootstrap, names.events)
    if replays:
        assert "without publishing" in w.log()
        assert len(everything) == len(committed)
    else:
        assert "without publishing" not in w.log()
        assert len(everything) > len(committed)  # the aborted transaction's events are in the log
    assert_exactly_once(committed, docs, w.state_dir)


def assert_exactly_once(committed: list[Msg], docs: list[bytes], state_dir: Path) -> Any:
    """One document event per input, no ``seq`` twice or missing, equal to the embedded engine's.

    Returns the embedded engine's store over the worker's decision order.
    """
    per_origin = Counter(m.headers["sd-origin"] for m in committed if m.json()["event"] in DOCUMENT_EVENTS)
    assert len(per_origin) == len(docs) and set(per_origin.values()) == {1}
    seqs = Counter(m.json()["seq"] for m in committed)
    assert set(seqs.values()) == {1}
    assert sorted(seqs) == list(range(1, len(seqs) + 1))  # no gap either
    events = sorted((m.json() for m in committed), key=lambda e: e["seq"])
    expected_store, expected_events = oracle(decision_order(events, {orjson.loads(d)["id"]: d for d in docs}))
    assert events == expected_events
    assert cluster_sets(worker_state(state_dir)) == cluster_sets(expected_store)
    return expected_store
