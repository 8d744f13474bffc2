"""The engine on both storage adapters: decisions, events, verification, state rules."""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Sequence

import pytest

from stream_dedupe.config import DedupeParams, RuntimeLimits, ShingleSpec
from stream_dedupe.core.engine import DedupeEngine
from stream_dedupe.core.layout import band_layout
from stream_dedupe.core.normalize import Normalizer
from stream_dedupe.core.shingle import shingle_hash, shingles
from stream_dedupe.errors import StateMismatchError
from stream_dedupe.exports import iter_clusters
from stream_dedupe.storage.base import KVStore
from stream_dedupe.storage.memory import MemoryStore

from .helpers import corpus, doc, text


def run_all(engine: DedupeEngine, items: list[tuple[str, str]], batch: int = 16) -> list[dict[str, object]]:
    events = []
    for i in range(0, len(items), batch):
        events += engine.process([doc(d, t) for d, t in items[i : i + batch]])
        engine.commit()
    return events


def exact_jaccard(a: str, b: str, spec: ShingleSpec) -> float:
    n = Normalizer()
    sa = {shingle_hash(s) for s in shingles(n.normalize(a), spec)}
    sb = {shingle_hash(s) for s in shingles(n.normalize(b), spec)}
    return len(sa & sb) / len(sa | sb)


def final_clusters(store: KVStore) -> list[tuple[str, str, tuple[str, ...]]]:
    return [(str(c["cluster"]), str(c["canonical"]), tuple(c["members"])) for c in iter_clusters(store)]  # type: ignore[arg-type]


def test_one_document_event_per_record_and_families_found(store: KVStore) -> None:
    items = corpus()
    events = run_all(DedupeEngine(DedupeParams(), store), items)
    doc_events = [e for e in events if e["event"] in ("new", "duplicate-of", "unchanged", "invalid")]
    assert [e["id"] for e in doc_events] == [d for d, _ in items]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    clusters = final_clusters(store)
    families = defaultdict(set)
    for d, _ in items:
        if d.startswith("f"):
            families[d.split("-")[0]].add(d)
    found = {frozenset(c[2]) for c in clusters}
    assert found == {frozenset(v) for v in families.values()}


def test_exact_and_short_documents(store: KVStore) -> None:
    engine = DedupeEngine(DedupeParams(min_tokens=10), store)
    long = text(random.Random(1))
    events = run_all(
        engine,
        [
            ("a", long),
            ("b", long.upper() + "!!"),
            ("s1", "Hello   world"),
            ("s2", "hello, WORLD"),
            ("s3", "hello world again"),
        ],
    )
    by_id = {e["id"]: e for e in events if e["event"] in ("new", "duplicate-of")}
    assert by_id["b"]["event"] == "duplicate-of" and by_id["b"]["exact"] is True and by_id["b"]["of"] == "a"
    assert by_id["s2"]["event"] == "duplicate-of" and by_id["s2"]["exact"] is True
    assert by_id["s3"]["event"] == "new"  # short: exact matching only


def test_candidates_below_threshold_never_become_duplicates(store: KVStore) -> None:
    # One row per band over-returns massively: verification must reject the extra candidates.
    params = DedupeParams(threshold=0.8, bands=64, rows=1, num_perm=64)
    rng = random.Random(3)
    base = text(rng, 200)
    items = [("base", base)] + [
        (f"e{i}", " ".join(base.split()[: 200 - 10 * i]) + " " + text(rng, 10 * i)) for i in range(1, 8)
    ]
    engine = DedupeEngine(params, store)
    events = run_all(engine, items)
    texts = dict(items)
    assert engine.counters["rejected_candidates"] > 0
    for e in events:
        if e["event"] == "duplicate-of":
            assert e["similarity"] >= 0.8
            assert exact_jaccard(texts[str(e["id"])], texts[str(e["of"])], params.shingle) > 0.6


def test_exact_verification_mode_uses_true_jaccard(store: KVStore) -> None:
    params = DedupeParams(verify="exact", bands=64, rows=1, num_perm=64)
    items = corpus(seed=11, families=10)
    texts = dict(items)
    events = run_all(DedupeEngine(params, store), items)
    dups = [e for e in events if e["event"] == "duplicate-of"]
    assert dups
    for e in dups:
        assert e["similarity"] == pytest.approx(
            exact_jaccard(texts[str(e["id"])], texts[str(e["of"])], params.shingle), abs=1e-6
        )


def test_unchanged_and_replaced_content(store: KVStore) -> None:
    rng = random.Random(5)
    base = text(rng)
    engine = DedupeEngine(DedupeParams(), store)
    run_all(engine, [("a", base), ("b", base + " tail words here")])
    again = run_all(engine, [("a", base)])
    assert again[0]["event"] == "unchanged" and again[0]["cluster"] == "a"
    changed = run_all(engine, [("b", text(rng))])
    assert changed[0]["event"] == "new"
    assert {"event": "canonical-changed", "previous": "b", "canonical": "a"}.items() <= changed[1].items()
    assert final_clusters(store) == []
    # the old content of b no longer matches anything: a copy of it joins nobody but a, and
    # being longer it takes a's place in the index (a is covered by it)
    later = run_all(engine, [("c", base + " tail words here")])
    assert later[0]["event"] == "new" and later[0]["cluster"] == "a" and later[0]["representative"] == "c"
    cover = next(e for e in later if e["event"] == "cover-changed")
    assert cover["entered"] == [] and [(x["id"], x["representative"]) for x in cover["left"]] == [("a", "c")]


class _ReadCountingStore(MemoryStore):
    """A memory store that records the keys read from each namespace."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: defaultdict[str, set[bytes]] = defaultdict(set)

    def get_many(self, namespace: str, keys: Sequence[bytes]) -> list[bytes | None]:
        self.reads[namespace].update(keys)
        return super().get_many(namespace, keys)


def test_an_unchanged_recrawl_reads_only_its_own_records() -> None:
    """A re-crawl whose content did not change reads no signature, shingle set, edge or candidate.

    Its event names its cluster, so it reads its own record and union-find records; reading its
    neighbours (as a changed version must, to decide again) made a re-crawl pass ~1.35x slower.
    """
    store = _ReadCountingStore()
    engine = DedupeEngine(DedupeParams(), store)
    items = corpus(seed=3, families=6, copies=3)
    run_all(engine, items, batch=64)
    store.reads.clear()
    again = run_all(engine, items, batch=64)
    assert [e["event"] for e in again] == ["unchanged"] * len(items)
    ids = {d.encode("utf-8") for d, _ in items}
    for namespace in ("sigs", "sets", "edges", "documents"):
        assert not store.reads[namespace] & ids, namespace
    assert store.reads["docs"] & ids == ids
    # nor its content group, nor the counts of its boilerplate lines (a re-crawl is not counted again)
    assert not store.reads["exact"] and not store.reads["boilerplate"]
    # one changed document still reads what it decides with: its own signature and its neighbours'
    store.reads.clear()
    first, body = items[0]
    changed = run_all(engine, [(first, body + " and a new closing sentence")])
    assert changed[0]["event"] in ("new", "duplicate-of")
    assert first.encode("utf-8") in store.reads["sigs"] and store.reads["sets"]


class _CallCountingStore(_ReadCountingStore):
    """A memory store that also counts its multi-gets (one per namespace and prefetch; one per single get)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def get_many(self, namespace: str, keys: Sequence[bytes]) -> list[bytes | None]:
        self.calls += 1
        return super().get_many(namespace, keys)


def test_a_batch_of_deletions_reads_with_multi_gets() -> None:
    """Deleting a batch loads what taking its documents out reads with one multi-get per namespace.

    Each deletion read its record, group, signature, kept skipped bands, union-find records and
    edges with single gets (~115 us a deletion, most of it those reads); the store is read
    a bounded number of times per batch now, not several times per deletion.
    """
    from stream_dedupe.core.records import Deletion

    store = _CallCountingStore()
    engine = DedupeEngine(DedupeParams(), store)
    items = corpus(seed=5, families=20, copies=3)
    run_all(engine, items, batch=64)
    gone = [doc_id for doc_id, _ in items[::2]]
    store.calls = 0
    store.reads.clear()
    events = engine.process([Deletion(doc_id) for doc_id in gone])
    engine.commit()
    assert [e["id"] for e in events if e["event"] == "deleted"] == gone
    assert store.calls <= 40 < 3 * len(gone), store.calls
    assert {d.encode("utf-8") for d in gone} <= store.reads["sigs"]


def test_a_document_taken_out_twice_in_one_batch_decides_as_in_separate_batches() -> None:
    """Band hashes computed for a batch's removals are used only for the signature they came from.

    A document deleted, added back with other content, and deleted again (and a re-crawl changed
    twice) in one batch gives the events and state of one record per batch.
    """
    from stream_dedupe.core.records import Deletion

    items = corpus(seed=6, families=8, copies=3)
    (a, body_a), (b, body_b) = items[0], items[3]
    other = items[6][1]
    tail: list[object] = [
        Deletion(a),
        doc(a, other),
        Deletion(a),
        doc(b, body_b + " with one more closing sentence here"),
        doc(b, body_a),
        doc(a, body_a),
    ]
    outcomes = []
    for batch_size in (len(tail), 1):
        store = MemoryStore()
        engine = DedupeEngine(DedupeParams(), store)
        run_all(engine, items, batch=64)
        events = []
        for start in range(0, len(tail), batch_size):
            events += engine.process(tail[start : start + batch_size])  # type: ignore[arg-type]
            engine.commit()
        outcomes.append(([{k: v for k, v in e.items() if k != "seq"} for e in events], final_clusters(store)))
    assert outcomes[0] == outcomes[1]
    of_a = [e["event"] for e in outcomes[0][0] if e.get("id") == a]
    assert of_a[0] == of_a[2] == "deleted" and of_a[1] in ("new", "duplicate-of"), of_a


def test_bridge_document_merges_and_removal_splits(store: KVStore) -> None:
    rng = random.Random(9)
    left, right = text(rng, 60), text(rng, 60)
    # J(left, left+right) = J(right, left+right) ~ 0.49 and J(left, right) = 0 (exact verification).
    engine = DedupeEngine(DedupeParams(threshold=0.45, lsh_margin=0.15, verify="exact"), store)
    events = run_all(engine, [("l", left), ("r", right), ("x", left + " " + right)])
    x_events = [e for e in events if e["id"] == "x"]
    # x is longer than both and verified-similar to each: it represents them in the index
    assert x_events[0]["event"] == "new" and x_events[0]["canonical"] == "x"
    merged = [e for e in x_events if e["event"] == "clusters-merged"]
    assert len(merged) == 1 and merged[0]["merged"] == ["l", "r"] and merged[0]["cluster"] == "l"
    cover = next(e for e in x_events if e["event"] == "cover-changed")
    assert [(c["id"], c["representative"]) for c in cover["left"]] == [("l", "x"), ("r", "x")]
    assert final_clusters(store) == [("l", "x", ("l", "r", "x"))]
    split = run_all(engine, [("x", text(rng, 80))])
    assert split[0]["event"] == "new"
    assert next(e for e in split if e["event"] == "cover-changed")["entered"] == ["l", "r"]
    split_event = next(e for e in split if e["event"] == "cluster-split")
    assert split_event["cluster"] == "l" and split_event["previous"] == "x"
    assert sorted(c["cluster"] for c in split_event["clusters"]) == ["l", "r"]
    assert sorted(c["members"] for c in split_event["clusters"]) == [["l"], ["r"]]
    assert final_clusters(store) == []


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_final_clusters_do_not_depend_on_order_or_batching(seed: int) -> None:
    items = corpus(seed=21, families=25, copies=4)
    reference = MemoryStore()
    run_all(DedupeEngine(DedupeParams(), reference), items, batch=1000)
    shuffled = list(items)
    random.Random(seed).shuffle(shuffled)
    other = MemoryStore()
    run_all(DedupeEngine(DedupeParams(), other), shuffled, batch=seed * 7)
    assert final_clusters(other) == final_clusters(reference)


def test_parameters_are_stored_and_checked(store: KVStore) -> None:
    DedupeEngine(DedupeParams(num_perm=128), store).commit()
    DedupeEngine(DedupeParams(num_perm=128), store)  # same: fine
    with pytest.raises(StateMismatchError, match=r"num_perm: state has 128, this run asks for 64.*new directory"):
        DedupeEngine(DedupeParams(num_perm=64), store)
    with pytest.raises(StateMismatchError, match="shingle"):
        DedupeEngine(DedupeParams(shingle=ShingleSpec("char", 5)), store)


def test_hot_buckets_are_capped(store: KVStore) -> None:
    body = text(random.Random(2))
    items = [(f"d{i}", body + f" x{i} y{i} z{i}") for i in range(8)]
    engine = DedupeEngine(DedupeParams(), store, RuntimeLimits(max_bucket_size=3))
    run_all(engine, items)
    assert engine.counters["hot_bucket_skips"] > 0
    clusters = final_clusters(store)
    assert len(clusters) == 1 and len(clusters[0][2]) == 8


@pytest.mark.parametrize("seed", [17, 18, 19, 20])
def test_canonical_updates_replay_to_the_canonical_set(store: KVStore, seed: int) -> None:
    """Applying every batch's canonical updates to a dict (a compacted topic) gives the canonical set."""
    from stream_dedupe.core.records import Deletion
    from stream_dedupe.exports import iter_canonical_documents

    rng = random.Random(seed)
    bases = [text(rng, 80) for _ in range(6)]
    engine = DedupeEngine(DedupeParams(), store)
    topic: dict[str, bytes] = {}
    for step in range(40):
        batch: list[object] = []
        for _ in range(rng.randint(1, 6)):
            doc_id = f"d{rng.randrange(20)}"
            roll = rng.random()
            if roll < 0.15:
                batch.append(Deletion(doc_id))
            else:
                body = bases[rng.randrange(len(bases))]
                words = body.split()[: rng.randint(70, 80)]
                batch.append(doc(doc_id, " ".join(words) + f" v{rng.randrange(3)}"))
        events = engine.process(batch)  # type: ignore[arg-type]
        for doc_id, raw in engine.canonical_updates(events):
            if raw is None:
                topic.pop(doc_id, None)
            else:
                topic[doc_id] = raw
        engine.commit()
        assert sorted(topic.values()) == sorted(iter_canonical_documents(store)), step


def test_deleting_a_canonical_elects_another(store: KVStore) -> None:
    from stream_dedupe.core.records import Deletion

    body = text(random.Random(8), 100)
    engine = DedupeEngine(DedupeParams(), store)
    run_all(engine, [("a", body), ("b", body + " and a longer tail")])
    events = engine.process([Deletion("b"), Deletion("zzz")])
    assert events[0] == {"event": "deleted", "id": "b", "known": True, "seq": events[0]["seq"]}
    assert any(e["event"] == "canonical-changed" and e["canonical"] == "a" for e in events)
    assert events[-1]["event"] == "deleted" and events[-1]["known"] is False
    assert engine.canonical_updates(events) == [("b", None), ("a", engine.state.document_json("a")), ("zzz", None)]
    engine.commit()
    assert engine.cluster_of("b") is None


def test_chained_members_are_never_dropped_without_a_similar_representative(store: KVStore) -> None:
    """A ~ B and B ~ C put A, B, C in one cluster; C, far from A, stays in the index."""
    rng = random.Random(31)
    p, q, r = text(rng, 50).split(), text(rng, 50).split(), text(rng, 20).split()
    a, b, c = " ".join(p + q), " ".join(p[15:] + q), " ".join(p[15:] + q[:40] + r[:5])
    params = DedupeParams(threshold=0.75, lsh_margin=0.25, verify="exact")
    spec = params.shingle
    assert exact_jaccard(a, b, spec) >= 0.75 and exact_jaccard(b, c, spec) >= 0.75 > exact_jaccard(a, c, spec)
    engine = DedupeEngine(params, store)
    events = run_all(engine, [("c", c), ("b", b), ("a", a)], batch=1)
    clusters = list(iter_clusters(store))
    assert [cl["members"] for cl in clusters] == [["a", "b", "c"]]
    # order: a (longest) is a representative; b is covered by a; c has no pair with a: kept
    assert clusters[0]["representatives"] == ["a", "c"] and clusters[0]["covered_by"] == {"b": "a"}
    by_id = {e["id"]: e for e in events if e["event"] in ("new", "duplicate-of")}
    assert by_id["c"]["event"] == "new" and by_id["a"]["event"] == "new"
    from stream_dedupe.exports import iter_canonical_documents

    kept = sorted(orjson_id(raw) for raw in iter_canonical_documents(store))
    assert kept == ["a", "c"]


def orjson_id(raw: bytes) -> str:
    import orjson

    return str(orjson.loads(raw)["id"])


def test_per_source_thresholds_use_the_stricter_one(store: KVStore) -> None:
    rng = random.Random(41)
    base = text(rng, 100)
    near = " ".join(base.split()[:80])  # J = 78/98: shorter, so base represents it
    params = DedupeParams(threshold=0.6, lsh_margin=0.2, verify="exact", source_thresholds=(("notes", 0.95),))
    j = exact_jaccard(base, near, params.shingle)
    assert 0.6 <= j < 0.95
    engine = DedupeEngine(params, store)
    events = engine.process(
        [
            doc("t1", base, source="tickets"),
            doc("t2", near, source="tickets"),
            doc("n1", base + " zz", source="notes"),
            doc("n2", near + " zz", source="notes"),
        ]
    )
    engine.commit()
    kinds = {e["id"]: e for e in events if e["event"] in ("new", "duplicate-of")}
    assert kinds["t2"]["event"] == "duplicate-of" and kinds["t2"]["threshold"] == 0.6
    # notes pages at ~0.75 are both kept (their source's threshold is 0.95), also against tickets
    assert kinds["n2"]["event"] == "new"
    assert band_layout(params) == band_layout(DedupeParams(threshold=0.6, lsh_margin=0.2))
    with pytest.raises(StateMismatchError, match="source_thresholds"):
        DedupeEngine(DedupeParams(threshold=0.6, lsh_margin=0.2, verify="exact"), store)


def test_empty_texts_are_never_duplicates_and_updates_are_flagged(store: KVStore) -> None:
    body = text(random.Random(12), 60)
    engine = DedupeEngine(DedupeParams(), store)
    events = engine.process([doc("e1", ""), doc("e2", "   \n\t "), doc("e3", "... --- !!!"), doc("a", body)])
    assert [(e["event"], e.get("reason")) for e in events] == [("invalid", "empty-text")] * 3 + [("new", None)]
    assert events[3]["updated"] is False
    engine.commit()
    assert engine.cluster_of("e1") is None and engine.cluster_of("e2") is None
    again = engine.process([doc("a", body + " edited at the end"), doc("a", body + " edited at the end")])
    assert again[0]["event"] == "new" and again[0]["updated"] is True
    assert again[1]["event"] == "unchanged" and again[1]["updated"] is False
    # a known document whose text became empty leaves the index
    gone = engine.process([doc("a", "  ")])
    assert gone[0]["event"] == "invalid" and gone[0]["reason"] == "empty-text" and gone[0]["id"] == "a"
    assert "earlier version" in gone[0]["detail"]
    assert engine.canonical_updates(gone) == [("a", None)]
    engine.commit()
    assert engine.cluster_of("a") is None


def test_title_guard_keeps_pages_with_different_titles(store: KVStore) -> None:
    body = text(random.Random(51), 120)
    engine = DedupeEngine(DedupeParams(), store)
    events = engine.process(
        [
            doc("tcp", body, title="lb create tcp"),
            doc("ssl", body + " x", title="lb create ssl"),  # same page template, another command
            doc("tcp-copy", body, title="Fwd: LB create TCP"),  # a forward of the first one: a copy
            doc("untitled", body + " x"),  # no title: compared on its text
        ]
    )
    engine.commit()
    kinds = {e["id"]: e for e in events if e["event"] in ("new", "duplicate-of")}
    assert kinds["tcp"]["event"] == "new" and kinds["ssl"]["event"] == "new"
    assert kinds["tcp-copy"]["event"] == "duplicate-of" and kinds["tcp-copy"]["of"] == "tcp"
    assert kinds["tcp-copy"]["exact"] is True
    assert kinds["untitled"]["event"] == "duplicate-of"
    assert engine.counters["title_rejections"] >= 1
    off = DedupeEngine(DedupeParams(title_guard=False), MemoryStore())
    off.process([doc("tcp", body, title="lb create tcp"), doc("ssl", body, title="lb create ssl")])
    off.commit()
    assert [c["representatives"] for c in iter_clusters(off.store)] == [["ssl"]]  # guard off: one is dropped


@pytest.mark.parametrize("seed", [1, 2])
def test_events_tell_every_representative_change(seed: int) -> None:
    """Replaying document and cover-changed events gives each document's representative exactly."""
    from stream_dedupe.core.records import Deletion
    from stream_dedupe.storage.state import DocRecord

    rng = random.Random(seed)
    items = corpus(seed=seed, families=15, copies=4)
    rng.shuffle(items)
    store = MemoryStore()
    engine = DedupeEngine(DedupeParams(), store)
    replay: dict[str, str] = {}
    records: list[object] = [doc(i, t) for i, t in items] + [Deletion(i) for i, _ in items[:10]]
    for start in range(0, len(records), 9):
        for e in engine.process(records[start : start + 9]):  # type: ignore[arg-type]
            if e["event"] in ("new", "duplicate-of", "unchanged"):
                replay[e["id"]] = e["representative"]
            elif e["event"] == "deleted":
                replay.pop(e["id"], None)
            elif e["event"] == "cover-changed":
                replay.update({i: i for i in e["entered"]})
                replay.update({c["id"]: c["representative"] for c in (*e["left"], *e["moved"])})
        engine.commit()
    state = {k.decode(): DocRecord.decode(v).covered_by or k.decode() for k, v in store.items("docs")}
    assert replay == state
    assert sum(1 for k, v in state.items() if k != v) > 10
