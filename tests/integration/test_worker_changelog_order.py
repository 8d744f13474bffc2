"""The state's changelogs restore whole batches only: a fault at each step of a batch's changelog
write, followed by the loss of the state directory, loses nothing (issue 13).

The changelogs are one topic per table; a batch is sent as (1) its redo journal to the ``meta``
changelog, beside the content of the documents it adds (originals, signatures, shingle sets),
which the journal leaves out and checks instead, (2) the other tables, (3) ``meta``'s own records
(the decided offsets) and the journal's tombstones. ``STREAM_DEDUPE_FAULT=<step>:2`` makes the
decide stage exit (code 86) right after step 1 or 2 of a batch has been acknowledged
(``settle-lost-content``: step 1 without the content, as if the crash had come between the
topics); the state directory is then deleted (a lost disk, or a takeover by a worker without a
copy) and a new worker rebuilds the state from the changelogs alone. Every input must then have
exactly one (identical) decision, equal to the embedded engine's over the same order, and the
same clusters.
"""

from __future__ import annotations

import shutil
from typing import Any

import orjson
import pytest

from stream_dedupe.worker.journal import JOURNAL_HEAD, JOURNAL_PREFIX, decode_batch
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


def changelog(broker: Broker, names: Names, namespace: str) -> dict[bytes, bytes | None]:
    """The final value of each key of a table's changelog (None: a tombstone)."""
    return {m.key: m.value for m in consume(broker.bootstrap, f"{names.app_id}-state-{namespace}-changelog") if m.key}


def changelog_journal(meta: dict[bytes, bytes | None]) -> dict[str, dict[bytes, bytes | None]]:
    head = meta[JOURNAL_HEAD]
    assert head is not None
    count = int(head.partition(b":")[0])
    return decode_batch(b"".join(meta[JOURNAL_PREFIX + b"%d" % i] or b"" for i in range(count)))


@pytest.mark.parametrize("step", ["settle-lost-content", "settle-journal", "settle-tables"])
def test_fault_in_the_changelog_write_then_disk_loss(step: str, broker: Broker, names: Names, workers: Any) -> None:
    docs = synth_docs(600, seed=5)
    keyed = [(orjson.loads(d)["id"].encode(), d) for d in docs]
    produce(broker.bootstrap, names.input, keyed)
    w = workers(log_name="a", extra=["--batch-size", "100"])
    w.env = {"STREAM_DEDUPE_FAULT": f"{step}:2"}
    w.start()
    assert w.proc is not None and w.proc.wait(120) == 86, w.log()[-3000:]
    assert f"fault injection {step}:2" in w.log()
    journal = changelog_journal(changelog(broker, names, "meta"))
    recorded = {key for key, value in journal["docs"].items() if value is not None}
    for namespace in ("documents", "sigs"):  # the journal holds no content of the documents it adds
        puts = {key for key, value in journal.get(namespace, {}).items() if value is not None}
        assert len(recorded - puts) >= 100, (namespace, len(recorded), len(puts))
        arrived = recorded - puts <= set(changelog(broker, names, namespace))  # sent beside the journal
        assert arrived == (step != "settle-lost-content")
    shutil.rmtree(w.state_dir)  # the disk is lost: only the changelogs remain

    w2 = workers(log_name="b").start()
    w2.wait_ready(90)
    msgs = consume(broker.bootstrap, names.events, until=n_document_events(len(docs)), timeout=120)
    assert w2.stop() == 0
    reapplied = "re-applied a state batch journaled by a worker that stopped while writing it" in w2.log()
    dropped = "dropped a journaled state batch whose new documents did not all reach the changelogs" in w2.log()
    assert (reapplied, dropped) == ((False, True) if step == "settle-lost-content" else (True, False))
    events = assert_one_decision_per_input(msgs, len(docs))
    raw_by_id = {orjson.loads(d)["id"]: d for d in docs}
    expected_store, expected_events = oracle(decision_order(events, raw_by_id))
    assert events == expected_events
    assert cluster_sets(worker_state(w2.state_dir)) == cluster_sets(expected_store)
