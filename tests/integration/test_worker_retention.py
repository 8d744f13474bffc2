"""Retention in the worker (``--max-age``): old documents leave as deletions, through the decide stage.

A real broker and worker; the crawler and the indexer are confluent-kafka clients. The sweep sends
expiry records to the index topic; the decide stage deletes what is still expired at its turn.
"""

from __future__ import annotations

import datetime as dt
import re
import time
from typing import Any

import orjson
import pytest
from confluent_kafka import Producer

from tests.integration.conftest import (
    Broker,
    Names,
    consume,
    document_events,
    produce,
    replay_compacted,
)

NOW = dt.datetime.now(dt.UTC)


def stamp(days_ago: float) -> str:
    return (NOW - dt.timedelta(days=days_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def page(doc_id: str, topic: int, source: str | None, days_ago: float | None, tail: str = "") -> bytes:
    words = " ".join(f"t{topic}w{j % 89} x{(j * topic) % 61}" for j in range(80))
    doc: dict[str, Any] = {"id": doc_id, "text": f"page about {topic}: {words}{tail}"}
    if source is not None:
        doc["source"] = source
    if days_ago is not None:
        doc["updated_at"] = stamp(days_ago)
    return orjson.dumps(doc)


def metric(w: Any, name: str) -> float:
    status, body = w.get("/metrics")
    assert status == 200
    match = re.search(rf"^{re.escape(name)} (\S+)$", body.decode(), re.MULTILINE)
    return float(match.group(1)) if match else 0.0


def wait_for(check: Any, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.5)


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
def test_old_documents_expire_by_source_and_fresh_ones_stay(
    broker: Broker, names: Names, workers: Any, guarantee: str
) -> None:
    docs = [
        ("news-old", page("news-old", 1, "news", 3)),  # expires (news: 1 day) ...
        ("news-old-copy", page("news-old-copy", 1, "news", 2.5, " updated")),  # ... with its near copy
        ("news-new", page("news-new", 2, "news", 0.1)),  # younger than a day: stays
        ("news-undated", page("news-undated", 3, "news", None)),  # no updated_at: never expires
        ("wiki-old", page("wiki-old", 4, "wiki", 400)),  # no rule for wiki: never expires
        ("plain-old", page("plain-old", 5, None, 40)),  # no source: the "=30d" rule
        ("plain-new", page("plain-new", 6, None, 10)),
        ("news-kept", page("news-kept", 7, "news", 0.2)),  # a stale expiry record names it below
    ]
    extra = ["--max-age", "news = 1d, =30d,blog=1d", "--expire-interval", "1", "--processing-guarantee", guarantee]
    w = workers(extra=extra).start()
    w.wait_ready()
    produce(broker.bootstrap, names.input, [(k.encode(), v) for k, v in docs])

    expired = {"news-old", "news-old-copy", "plain-old"}

    def deleted_ids() -> list[str]:
        events = document_events(consume(broker.bootstrap, names.events, timeout=30, idle=0.5))
        return [e["id"] for e in events if e["event"] == "deleted"]

    wait_for(lambda: sorted(deleted_ids()) == sorted(expired))
    # a sweep's expiry record reaching the decider after a re-crawl (here: a stale cutoff naming a
    # fresh page) deletes nothing: the committed record is newer than the cutoff
    cutoff_us = int((NOW - dt.timedelta(days=1)).timestamp() * 1e6)
    stale = Producer({"bootstrap.servers": broker.bootstrap})
    stale.produce(f"{names.app_id}-index", key=b"news-kept", value=None, headers=[("sd-expire", b"%d" % cutoff_us)])
    stale.produce(f"{names.app_id}-index", key=b"never-seen", value=None, headers=[("sd-expire", b"%d" % cutoff_us)])
    assert stale.flush(10) == 0
    time.sleep(4)  # several more sweeps, and the stale records decided

    events = document_events(consume(broker.bootstrap, names.events, timeout=30))
    deleted = [e for e in events if e["event"] == "deleted"]
    assert sorted(e["id"] for e in deleted) == sorted(expired)  # each once; news-kept and never-seen untouched
    assert all(e["known"] for e in deleted)
    assert metric(w, "stream_dedupe_expired_documents_total") == 3
    index_origins = {m.headers.get("sd-origin") for m in consume(broker.bootstrap, names.events, timeout=30)}
    assert any(o is not None and f"{names.app_id}-index".encode() in o for o in index_origins)

    # the indexer's view: the compacted deduped topic holds exactly the pages that were not expired
    deduped = replay_compacted(consume(broker.bootstrap, names.deduped, timeout=30))
    assert sorted(k.decode() for k in deduped) == sorted(k for k, _ in docs if k not in expired)

    # a re-crawl of an expired page is new again
    produce(broker.bootstrap, names.input, [(b"news-old", page("news-old", 1, "news", 0))])
    wait_for(
        lambda: (
            [e["event"] for e in document_events(consume(broker.bootstrap, names.events, timeout=30, idle=0.5))][-1:]
            == ["new"]
        )
    )
    assert w.stop() == 0
    assert "retention sweep" in w.log()
    assert "retention: news: 1 days, (no source): 30 days, blog: 1 days; a sweep every 1s" in w.log()
    assert "no document of the state has source 'blog', so its rule expires nothing" in w.log()


def test_bad_max_age_is_refused_at_start(names: Names, workers: Any) -> None:
    w = workers(extra=["--max-age", "news=7 days"]).start()
    assert w.proc is not None and w.proc.wait(30) == 2
    assert "max_age" in w.log() and "7d" in w.log()
