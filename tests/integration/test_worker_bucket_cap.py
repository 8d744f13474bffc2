"""A cluster of near copies bigger than the worker's LSH bucket cap keeps one document on the deduped topic."""

from __future__ import annotations

import random
import re
import time
from typing import Any

import orjson

from tests.integration.conftest import Broker, Names, consume, n_document_events, produce, replay_compacted

_rng = random.Random(7)
PAGE = " ".join(_rng.choice([f"w{i}" for i in range(3000)]) for _ in range(150))


def test_copies_past_the_bucket_cap_leave_one_canonical(broker: Broker, names: Names, workers: Any) -> None:
    # copy c10 is the first longer one (a two-digit visit): whichever of the three input partitions
    # it comes from, it arrives after the first four copies filled their buckets of 4
    w = workers(extra=["--max-bucket-size", "4"]).start()
    w.wait_ready()
    copies = [(f"c{i:02d}".encode(), orjson.dumps({"id": f"c{i:02d}", "text": f"{PAGE} visit {i}"})) for i in range(30)]
    produce(broker.bootstrap, names.input, list(copies))
    consume(broker.bootstrap, names.events, until=n_document_events(len(copies)), timeout=90)
    deduped = replay_compacted(consume(broker.bootstrap, names.deduped))
    assert list(deduped) == [b"c10"], sorted(deduped)
    time.sleep(5.5)  # one refresh of the periodic metrics
    status, body = w.get("/metrics")
    assert status == 200
    found = re.search(r"^stream_dedupe_full_bucket_candidates_total (\S+)$", body.decode(), re.M)
    assert found and float(found.group(1)) > 0, body.decode()
    assert w.stop() == 0
