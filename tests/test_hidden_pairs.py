"""A cluster of near copies bigger than the LSH bucket cap keeps the representatives it would keep without the cap.

Before :mod:`stream_dedupe.core.hidden_pairs`, the copies that arrived after their buckets filled
could not meet a representative that was not in the buckets either, and stayed representatives:
1,200 near copies kept 618 at the default cap (BENCHMARKS.md, "One large group of copies").
"""

from __future__ import annotations

import random
from pathlib import Path

import orjson

from stream_dedupe.config import DedupeParams, RuntimeLimits
from stream_dedupe.core.engine import DedupeEngine
from stream_dedupe.exports import iter_representative_ids
from stream_dedupe.storage.base import KVStore
from stream_dedupe.storage.memory import MemoryStore
from stream_dedupe.storage.rocks import RocksStore

from .helpers import doc, text

PAGE = text(random.Random(41), 120)


def copies(n: int, dated: bool = False) -> list[tuple[str, str, str | None]]:
    """``n`` copies of one page with a visit counter: copy 10 is the first longer one (two digits)."""
    return [
        (f"c{i:03d}", f"{PAGE} visit {i}", f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}Z" if dated else None)
        for i in range(n)
    ]


def run(store: KVStore, items: list[tuple[str, str, str | None]], cap: int, batch: int = 7) -> list[bytes]:
    """The events (as JSON) of ``items`` decided in batches, on a fresh engine over ``store``."""
    engine = DedupeEngine(DedupeParams(), store, RuntimeLimits(max_bucket_size=cap))
    events: list[bytes] = []
    for at in range(0, len(items), batch):
        records = [doc(i, body, **({"updated_at": when} if when else {})) for i, body, when in items[at : at + batch]]
        events += [orjson.dumps(e) for e in engine.process(records)]
        engine.commit()
    run.counters = engine.counters  # type: ignore[attr-defined]
    return events


def test_copies_past_the_cap_find_a_representative_that_joined_no_bucket(store: KVStore) -> None:
    run(store, copies(60), cap=5)
    counters = run.counters  # type: ignore[attr-defined]
    assert counters["hot_bucket_skips"] > 0 and counters["full_bucket_candidates"] > 0
    # c010, the first longer copy, arrived after c000-c004 filled its buckets; it still covers all
    assert list(iter_representative_ids(store)) == ["c010"]
    roomy = MemoryStore()
    run(roomy, copies(60), cap=1000)
    assert list(iter_representative_ids(roomy)) == ["c010"]  # what the cap must not change


def test_the_newest_copy_takes_over_past_the_cap(store: KVStore) -> None:
    """With ``updated_at`` every arrival ranks first: the one that covers its former representative covers all."""
    run(store, copies(40, dated=True), cap=4)
    assert list(iter_representative_ids(store)) == ["c039"]


def test_a_restart_decides_as_one_run_past_the_cap(tmp_path: Path) -> None:
    """The band tables rebuilt at start-up are full where they were: the same pairs are looked for."""
    items = copies(50)
    expected = run(MemoryStore(), items, cap=4)
    store = RocksStore(tmp_path / "state")
    events = run(store, items[:23], cap=4)
    store.close()
    store = RocksStore(tmp_path / "state")
    events += run(store, items[23:], cap=4)
    assert events == expected
    assert list(iter_representative_ids(store)) == ["c010"]
    store.close()


def test_index_shards_find_the_same_hidden_pairs() -> None:
    """The gather's window judges a full bucket over every shard, as the single table does."""
    from stream_dedupe.core.sharding.gather import ShardedStore
    from stream_dedupe.core.sharding.local import LocalShards

    items = copies(45, dated=True)
    expected = run(MemoryStore(), items, cap=4)
    local = MemoryStore()
    store = ShardedStore(local, LocalShards(3, lambda i: MemoryStore()))
    assert run(store, items, cap=4) == expected
    assert run.counters["full_bucket_candidates"] > 0  # type: ignore[attr-defined]
    assert list(iter_representative_ids(local)) == ["c044"]
