"""The lifecycle invariant: after any sequence of inserts, updates and deletes, the clusters and
the canonical set equal those of a from-scratch run over the surviving documents."""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stream_dedupe.config import DedupeParams
from stream_dedupe.core.engine import DedupeEngine
from stream_dedupe.core.records import Deletion
from stream_dedupe.core.verify import exact_jaccard
from stream_dedupe.exports import iter_canonical_documents, iter_clusters
from stream_dedupe.storage.memory import MemoryStore
from stream_dedupe.storage.state import DocRecord, StateView

from .helpers import VOCAB, doc

_rng = random.Random(99)
BASES = [" ".join(_rng.choice(VOCAB) for _ in range(60)) for _ in range(4)]

# An operation: (doc id, None for a delete, else (base, cut, suffix)) — variants of a few bases
# give exact duplicates, near-duplicates, bridges and unrelated documents.
operations = st.lists(
    st.tuples(
        st.integers(0, 11),
        st.one_of(st.none(), st.tuples(st.integers(0, 3), st.integers(50, 60), st.integers(0, 2))),
    ),
    min_size=1,
    max_size=40,
)


def body(base: int, cut: int, suffix: int) -> str:
    return " ".join(BASES[base].split()[:cut]) + (f" extra{suffix} words{suffix}" if suffix else "")


def snapshot(store: MemoryStore) -> tuple[list[object], list[bytes]]:
    return list(iter_clusters(store, min_size=1)), sorted(iter_canonical_documents(store))


def assert_covered(store: MemoryStore, params: DedupeParams) -> None:
    """No dropped document without a representative it is verified-similar to (exact Jaccard)."""
    view = StateView(store)
    for key, raw in store.items("docs"):
        record = DocRecord.decode(raw)
        if record.covered_by is None:
            continue
        rep = view.doc(record.covered_by)
        assert rep is not None and rep.covered_by is None, (key, record.covered_by)
        mine, theirs = view.shingle_set(key.decode()), view.shingle_set(record.covered_by)
        if rep.content_hash == record.content_hash:
            continue
        assert mine is not None and theirs is not None
        assert exact_jaccard(mine, theirs) >= params.threshold, (key, record.covered_by)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations, st.integers(1, 7), st.sampled_from(["estimate", "exact"]))
def test_incremental_equals_from_scratch(
    ops: list[tuple[int, tuple[int, int, int] | None]], batch: int, verify: str
) -> None:
    params = DedupeParams(verify=verify)  # type: ignore[arg-type]
    store = MemoryStore()
    engine = DedupeEngine(params, store)
    alive: dict[str, str] = {}
    records: list[object] = []
    for number, spec in ops:
        doc_id = f"d{number:02d}"
        if spec is None:
            records.append(Deletion(doc_id))
            alive.pop(doc_id, None)
        else:
            text = body(*spec)
            records.append(doc(doc_id, text))
            alive[doc_id] = text
    for start in range(0, len(records), batch):
        engine.process(records[start : start + batch])  # type: ignore[arg-type]
        engine.commit()
    scratch = MemoryStore()
    fresh = DedupeEngine(params, scratch)
    fresh.process([doc(i, t) for i, t in sorted(alive.items())])
    fresh.commit()
    assert snapshot(store) == snapshot(scratch)
    if verify == "exact":
        assert_covered(store, params)


def test_retention_expires_old_documents_of_a_source_like_deletions() -> None:
    from stream_dedupe.core.records import parse_timestamp
    from stream_dedupe.core.retention import RetentionPolicy, expired_ids
    from stream_dedupe.embedded import expire

    params = DedupeParams(verify="exact")
    store = MemoryStore()
    engine = DedupeEngine(params, store)
    docs = []
    for i in range(12):
        source = "news" if i % 2 else "runbooks"
        day = 1 + i  # 2026-11-01 .. 2026-11-12
        docs.append((f"d{i:02d}", body(i % 3, 55 + i % 5, i % 2), source, f"2026-11-{day:02d}T00:00:00Z"))
    engine.process([doc(i, t, source=s, updated_at=u) for i, t, s, u in docs])
    engine.commit()
    policy = RetentionPolicy.parse(["news=7d"])
    now = parse_timestamp("2026-11-15T00:00:00Z")
    gone = list(expired_ids(store, policy, now))
    # news documents updated before 2026-11-08; runbooks are kept forever
    assert gone == [i for i, _, s, u in docs if s == "news" and u < "2026-11-08"]
    counts = expire(engine, gone, None, batch_size=2)
    assert counts["deleted"] == len(gone)
    survivors = [(i, t, s, u) for i, t, s, u in docs if i not in gone]
    scratch = MemoryStore()
    fresh = DedupeEngine(params, scratch)
    fresh.process([doc(i, t, source=s, updated_at=u) for i, t, s, u in survivors])
    fresh.commit()
    assert snapshot(store) == snapshot(scratch)


def test_retention_rules_are_validated() -> None:
    import pytest

    from stream_dedupe.core.retention import RetentionPolicy, parse_age
    from stream_dedupe.errors import ConfigError

    assert parse_age("7d") == 7 * 86_400_000_000 and parse_age("90s") == 90_000_000
    assert RetentionPolicy.parse(["=30d", "news=12h"]).max_age_us == {
        "": 30 * 86_400_000_000,
        "news": 12 * 3_600_000_000,
    }
    with pytest.raises(ConfigError, match="SOURCE=AGE"):
        RetentionPolicy.parse(["news"])
    with pytest.raises(ConfigError, match="unit"):
        parse_age("7 weeks")
    for zero in ("0d", "0s", " 00h "):  # every document of the source expired as it arrives: a slip
        with pytest.raises(ConfigError, match="positive age"):
            parse_age(zero)


def test_an_expiry_decided_later_deletes_only_what_is_still_that_old() -> None:
    """The worker's retention: the sweep's cutoff travels with the record; the decision re-checks it."""
    from stream_dedupe.core.records import parse_timestamp
    from stream_dedupe.core.retention import RetentionPolicy

    engine = DedupeEngine(DedupeParams(verify="exact"), MemoryStore())
    engine.process(
        [
            doc("old", body(0, 60, 0), source="news", updated_at="2026-11-01T00:00:00Z"),
            doc("undated", body(1, 60, 0), source="news"),
            doc("recrawled", body(2, 60, 0), source="news", updated_at="2026-11-01T00:00:00Z"),
        ]
    )
    engine.commit()
    policy = RetentionPolicy.parse(["news=7d"])
    cutoff = policy.cutoff_us("news", parse_timestamp("2026-11-15T00:00:00Z"))
    assert cutoff == parse_timestamp("2026-11-08T00:00:00Z")
    assert policy.cutoff_us("wiki", parse_timestamp("2026-11-15T00:00:00Z")) is None
    # between the sweep and the decision: one page re-crawled, one never existed
    engine.process([doc("recrawled", body(2, 60, 1), source="news", updated_at="2026-11-14T00:00:00Z")])
    engine.commit()
    items = [("old", cutoff), ("undated", cutoff), ("recrawled", cutoff), ("never-seen", cutoff)]
    assert engine.still_expired(items) == [True, False, False, False]


def test_an_unchanged_recrawl_keeps_a_page_current_for_retention() -> None:
    """A page the crawler still fetches is not expired because its text did not change."""
    from stream_dedupe.core.records import parse_timestamp
    from stream_dedupe.core.retention import RetentionPolicy, expired_ids

    store = MemoryStore()
    engine = DedupeEngine(DedupeParams(verify="exact"), store)
    text = body(0, 60, 0)
    first = engine.process([doc("page", text, source="news", updated_at="2026-11-01T00:00:00Z")])
    engine.commit()
    events = engine.process([doc("page", text, source="news", updated_at="2026-11-14T00:00:00Z")])
    engine.commit()
    assert [e["event"] for e in events] == ["unchanged"]
    record = StateView(store).doc("page")
    assert record is not None
    # the content's updated_at stays (it orders canonicals); the re-crawl's is the age retention reads
    assert record.updated_at_us == parse_timestamp("2026-11-01T00:00:00Z")
    assert record.seen_at_us == parse_timestamp("2026-11-14T00:00:00Z")
    policy = RetentionPolicy.parse(["news=7d"])
    assert list(expired_ids(store, policy, parse_timestamp("2026-11-15T00:00:00Z"))) == []
    assert list(expired_ids(store, policy, parse_timestamp("2026-11-22T00:00:00Z"))) == ["page"]
    # an older (or undated) re-crawl moves nothing back; a changed text starts a new record
    engine.process(
        [doc("page", text, source="news", updated_at="2026-11-02T00:00:00Z"), doc("page", text, source="news")]
    )
    engine.commit()
    again = StateView(store).doc("page")
    assert again is not None and again.seen_at_us == record.seen_at_us
    engine.process([doc("page", body(1, 60, 0), source="news", updated_at="2026-11-20T00:00:00Z")])
    engine.commit()
    changed = StateView(store).doc("page")
    assert changed is not None and changed.seen_at_us is None and first[0]["event"] == "new"
