"""Local state deleted: rebuilt from the changelog topics; later documents still deduped against earlier ones."""

from __future__ import annotations

import shutil
from typing import Any

import orjson

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


def test_state_dir_deleted_is_rebuilt_from_changelogs(broker: Broker, names: Names, workers: Any) -> None:
    docs = synth_docs(2000, seed=21)
    first, second = docs[:1200], docs[1200:]
    keyed = [(orjson.loads(d)["id"].encode(), d) for d in docs]
    produce(broker.bootstrap, names.input, keyed[:1200])
    w = workers(log_name="a").start()
    w.wait_ready()
    consume(broker.bootstrap, names.events, until=n_document_events(len(first)), timeout=90, idle=0.5)
    assert w.stop() == 0
    shutil.rmtree(w.state_dir)

    produce(broker.bootstrap, names.input, keyed[1200:])
    w2 = workers(log_name="b").start()
    w2.wait_ready()
    msgs = consume(broker.bootstrap, names.events, until=n_document_events(len(docs)), timeout=120)
    assert w2.stop() == 0
    assert "engine ready: 1200 documents in state" in w2.log()
    events = assert_one_decision_per_input(msgs, len(docs))

    # the documents of the second part found their duplicates among the first part
    first_ids = {orjson.loads(d)["id"] for d in first}
    second_ids = {orjson.loads(d)["id"] for d in second}
    # (a later copy is covered by a first-part document, or, ranking first, covers it: cover-changed)
    cross = {e["id"] for e in events if e["event"] == "duplicate-of" and e["id"] in second_ids and e["of"] in first_ids}
    for m in msgs:
        e = m.json()
        if e["event"] == "cover-changed" and e["id"] in second_ids and any(x["id"] in first_ids for x in e["left"]):
            cross.add(e["id"])
    assert len(cross) > 100

    raw_by_id = {orjson.loads(d)["id"]: d for d in docs}
    expected_store, expected_events = oracle(decision_order(events, raw_by_id))
    assert events == expected_events
    assert cluster_sets(worker_state(w2.state_dir)) == cluster_sets(expected_store)


def test_refuses_state_built_with_other_parameters(broker: Broker, names: Names, workers: Any) -> None:
    produce(broker.bootstrap, names.input, [(b"a", orjson.dumps({"id": "a", "text": "hello world"}))])
    w = workers(log_name="a").start()
    w.wait_ready()
    consume(broker.bootstrap, names.events, until=n_document_events(1), timeout=60, idle=0)
    assert w.stop() == 0
    w2 = workers(extra=["--threshold", "0.5"], log_name="b").start()
    assert w2.proc is not None
    assert w2.proc.wait(90) == 2
    assert "the state was built with different parameters (threshold: state has 0.8" in w2.log()


def test_a_state_dir_kept_while_the_cluster_lost_its_topics_is_refused_with_the_way_out(
    broker: Broker, names: Names, workers: Any
) -> None:
    """Faust's recovery crashed (ConsistencyError, a traceback); the worker now says what happened, exit 2."""
    import asyncio
    import time

    from aiokafka.admin import AIOKafkaAdminClient

    docs = synth_docs(60, seed=5)
    produce(broker.bootstrap, names.input, [(orjson.loads(d)["id"].encode(), d) for d in docs])
    w = workers(log_name="a").start()
    w.wait_ready()
    consume(broker.bootstrap, names.events, until=n_document_events(len(docs)), timeout=90, idle=0.5)
    assert w.stop() == 0
    kept = sorted((p.relative_to(w.state_dir), p.stat().st_size) for p in w.state_dir.rglob("*") if p.is_file())

    async def wipe() -> None:  # the cluster loses the app's topics (a new or wiped broker)
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await admin.start()
        try:
            mine = [t for t in await admin.list_topics() if t.startswith(names.app_id) or t.startswith(names.input)]
            await admin.delete_topics(mine)
            deadline = time.monotonic() + 30
            while set(mine) & set(await admin.list_topics()):
                assert time.monotonic() < deadline, "topics not deleted"
                await asyncio.sleep(0.5)
        finally:
            await admin.close()

    asyncio.run(wipe())
    again = workers(log_name="b").start()
    assert again.proc is not None and again.proc.wait(120) == 2, again.log()[-3000:]
    log = again.log()
    assert "Traceback" not in log and "ConsistencyError" not in log, log[-3000:]
    text = " ".join(log.split())
    assert f"the local state in {w.state_dir} holds" in text and "the Kafka cluster lost its data" in text
    assert "move the state directory away" in text
    now = sorted((p.relative_to(w.state_dir), p.stat().st_size) for p in w.state_dir.rglob("*") if p.is_file())
    assert [p for p, _ in now if p.suffix == ".sst"] == [p for p, _ in kept if p.suffix == ".sst"]  # data untouched
