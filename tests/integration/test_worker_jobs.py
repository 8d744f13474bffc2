"""``worker --jobs 2``: the sign stage signs in a spawned process; same decisions, and a killed signer costs nothing.

Real broker, real worker processes. The decisions are compared with the embedded engine over the
same records in the worker's decision order (as the other worker tests do), so a signature made
in the signing process that differed from the engine's own would show as a different event.
"""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path
from typing import Any

import orjson

from stream_dedupe.exports import iter_canonical_documents
from tests.integration.conftest import (
    Broker,
    Names,
    WorkerProcess,
    cluster_sets,
    consume,
    n_document_events,
    oracle,
    produce,
    replay_compacted,
    worker_state,
)
from tests.integration.test_worker_e2e import assert_one_decision_per_input, decision_order, synth_docs
from tests.integration.test_worker_scale_out import metric

N = 3000
_STARTED = re.compile(r"sign stage: (\d+) signing processes started \(pids ([\d, ]+)\)")


def signer_pids(w: WorkerProcess, starts: int = 1, timeout: float = 60.0) -> list[int]:
    """Pids of the signing processes named by the ``starts``-th "signing processes started" log line."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = _STARTED.findall(w.log())
        if len(found) >= starts:
            return [int(p) for p in found[starts - 1][1].split(", ")]
        time.sleep(0.2)
    raise AssertionError(f"no signing processes started ({starts}):\n{w.log()[-3000:]}")


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(") ")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


def check_against_oracle(broker: Broker, names: Names, w: WorkerProcess, docs: list[bytes], msgs: list[Any]) -> None:
    events = assert_one_decision_per_input(msgs, len(docs))
    raw_by_id = {orjson.loads(d)["id"]: d for d in docs}
    expected_store, expected_events = oracle(decision_order(events, raw_by_id))
    assert events == expected_events
    assert cluster_sets(worker_state(w.state_dir)) == cluster_sets(expected_store)
    deduped = replay_compacted(consume(broker.bootstrap, names.deduped))
    assert set(deduped.values()) == set(iter_canonical_documents(expected_store))


def test_signing_process_gives_the_engines_decisions(broker: Broker, names: Names, workers: Any) -> None:
    docs = synth_docs(N, seed=11)
    w = workers(extra=["--jobs", "2", "--batch-size", "100"])
    w.start()
    w.wait_ready()
    (pid,) = signer_pids(w)
    assert w.proc is not None and pid != w.proc.pid and alive(pid)
    assert metric(w, "stream_dedupe_sign_processes") == 1
    produce(broker.bootstrap, names.input, [(orjson.loads(d)["id"].encode(), d) for d in docs])
    msgs = consume(broker.bootstrap, names.events, until=n_document_events(N), timeout=180)
    # every document was signed by the sign stage (in the signing process), none by the decide stage
    assert metric(w, "stream_dedupe_signed_documents_total", '{stage="sign"}') >= 0.9 * N
    assert metric(w, "stream_dedupe_sign_pool_failures_total") == 0
    # kill -9 of the worker takes its signing process with it (no orphan keeps running)
    w.kill9()
    deadline = time.monotonic() + 10
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(pid), "the signing process outlived its worker"
    check_against_oracle(broker, names, w, docs, msgs)


def test_killed_signing_process_is_replaced_and_loses_nothing(broker: Broker, names: Names, workers: Any) -> None:
    docs = synth_docs(N, seed=12)
    w = workers(extra=["--jobs", "2", "--batch-size", "50"])
    w.start()
    w.wait_ready()
    (first,) = signer_pids(w)
    produce(broker.bootstrap, names.input, [(orjson.loads(d)["id"].encode(), d) for d in docs[:1500]])
    consume(broker.bootstrap, names.events, until=n_document_events(300), timeout=90, idle=0)
    os.kill(first, signal.SIGKILL)
    produce(broker.bootstrap, names.input, [(orjson.loads(d)["id"].encode(), d) for d in docs[1500:]])
    msgs = consume(broker.bootstrap, names.events, until=n_document_events(N), timeout=180)
    (second,) = signer_pids(w, starts=2)
    assert second != first and alive(second)
    assert metric(w, "stream_dedupe_sign_pool_failures_total") >= 1
    assert metric(w, "stream_dedupe_sign_processes") == 1
    assert w.proc is not None and w.proc.poll() is None, "the worker stopped"
    assert w.stop() == 0
    assert not alive(second), "the signing process outlived a clean stop"
    check_against_oracle(broker, names, w, docs, msgs)
