"""The state's changelogs restore whole batches only: a fault at each step of a batch's changelog
write, followed by the loss of the state directory, loses nothing (issue 13).

The changelogs are one topic per table; a batch is sent as (1) its redo journal to the ``meta``
changelog, (2) the other tables, (3) ``meta``'s own records (the decided offsets) and the
journal's tombstones. ``STREAM_DEDUPE_FAULT=<step>:2`` makes the decide stage exit (code 86)
right after step 1 or 2 of its second batch has been acknowledged; the state directory is then
deleted (a lost disk, or a takeover by a worker without a copy) and a new worker rebuilds the
state from the changelogs alone. Every input must then have exactly one (identical) decision,
equal to the embedded engine's over the same order, and the same clusters.
"""

from __future__ import annotations

import shutil
from typing import Any

import orjson
import pytest

from tests.integration.conftest import (
    Broker,
    Names,
    cluster_sets,
    consume,
    n_document_events,
    oracle,
    produce,
    worker_state,
)
from tests.integration.test_worker_e2e import assert_one_decision_per_input, decision_order, synth_docs


@pytest.mark.parametrize("step", ["settle-journal", "settle-tables"])
def test_fault_in_the_changelog_write_then_disk_loss(step: str, broker: Broker, names: Names, workers: Any) -> None:
    docs = synth_docs(600, seed=5)
    keyed = [(orjson.loads(d)["id"].encode(), d) for d in docs]
    produce(broker.bootstrap, names.input, keyed)
    w = workers(log_name="a", extra=["--batch-size", "100"])
    w.env = {"STREAM_DEDUPE_FAULT": f"{step}:2"}
    w.start()
    assert w.proc is not None and w.proc.wait(120) == 86, w.log()[-3000:]
    assert f"fault injection {step}:2" in w.log()
    shutil.rmtree(w.state_dir)  # the disk is lost: only the changelogs remain

    w2 = workers(log_name="b").start()
    w2.wait_ready(90)
    msgs = consume(broker.bootstrap, names.events, until=n_document_events(len(docs)), timeout=120)
    assert w2.stop() == 0
    assert "re-applied a state batch journaled by a worker that stopped while writing it" in w2.log()
    events = assert_one_decision_per_input(msgs, len(docs))
    raw_by_id = {orjson.loads(d)["id"]: d for d in docs}
    expected_store, expected_events = oracle(decision_order(events, raw_by_id))
    assert events == expected_events
    assert cluster_sets(worker_state(w2.state_dir)) == cluster_sets(expected_store)
