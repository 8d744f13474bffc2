"""The sharded index decides exactly as one unsharded engine, and survives restarts and crashes.

The engine runs unchanged on ``ShardedStore(local, LocalShards(S, open_store))``: the signatures,
shingle sets and band tables live in S shards, everything else in the gather's own store. For the
same stream it must emit the same event bytes and end in the same state as an engine on one
:class:`~stream_dedupe.storage.memory.MemoryStore`, for every S, hot-bucket cap and restart or
crash point. Also covered: where each key lives, the shards' commit protocol, the errors a user
can hit, the change sets' byte form and the shards' band tables (:mod:`.bands`).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stream_dedupe.config import BoilerplateConfig, DedupeParams, RuntimeLimits
from stream_dedupe.core.engine import DedupeEngine
from stream_dedupe.core.layout import resolve
from stream_dedupe.core.lsh import band_hashes
from stream_dedupe.core.records import Deletion, Record
from stream_dedupe.core.sharding import outbox
from stream_dedupe.core.sharding.bands import ShardBandIndex
from stream_dedupe.core.sharding.gather import ShardedStore, owner
from stream_dedupe.core.sharding.local import LocalShards
from stream_dedupe.core.sharding.ops import BandOp, ShardOps, decode_all, encode_all
from stream_dedupe.core.sharding.outbox import OUTBOX_KEY, OUTBOX_PARTS_KEY, outbox_writes, part_key, read_outbox
from stream_dedupe.core.sharding.shard import IndexShard
from stream_dedupe.core.sharding.window import BandWindow
from stream_dedupe.errors import StateError, StateMismatchError
from stream_dedupe.storage.base import NAMESPACES, KVStore
from stream_dedupe.storage.memory import MemoryStore
from stream_dedupe.storage.rocks import RocksStore
from stream_dedupe.storage.state import DocRecord

from .helpers import corpus, doc, edit
from .test_fastpath import body, operations

HEAVY = ("sigs", "sets")
SHARD_META = (b"shards",)
PARAMS = DedupeParams(verify="exact", boilerplate=BoilerplateConfig(min_docs=4))
State = dict[str, list[tuple[bytes, bytes]]]
Outcome = tuple[list[bytes], State, dict[str, int]]


def split(records: Sequence[Record], sizes: Sequence[int]) -> list[list[Record]]:
    batches, start, turn = [], 0, 0
    while start < len(records):
        size = sizes[turn % len(sizes)]
        batches.append(list(records[start : start + size]))
        start, turn = start + size, turn + 1
    return batches


def stream(seed: int = 7) -> list[Record]:
    """The helpers' corpus plus exact copies, re-crawls (same and new text) and deletes, shuffled."""
    rng = random.Random(seed)
    docs = corpus(seed)
    records: list[Record] = [doc(i, t, source="portal") for i, t in docs]
    records += [doc(f"x{i}", t) for i, t in rng.sample(docs, 12)]  # exact duplicates under new ids
    records += [doc(i, edit(rng, t, 3)) for i, t in rng.sample(docs, 10)]  # re-crawls with new text
    records += [doc(i, t) for i, t in rng.sample(docs, 5)]  # unchanged re-crawls
    records += [Deletion(i) for i, _ in rng.sample(docs, 8)]
    tail = records[40:]
    rng.shuffle(tail)
    return records[:40] + tail


def sharded(local: KVStore, shards: int, open_store: Callable[[int], KVStore]) -> tuple[ShardedStore, LocalShards]:
    client = LocalShards(shards, open_store)
    return ShardedStore(local, client), client


def drive(engine: DedupeEngine, batches: Sequence[Sequence[Record]]) -> list[bytes]:
    events: list[bytes] = []
    for batch in batches:
        events.extend(orjson.dumps(e) for e in engine.process(batch))
        engine.commit()
    return events


def snapshot(store: KVStore, local: KVStore) -> State:
    """Every namespace: the sharded ones read through ``store``, the rest from ``local`` (no shard layout keys)."""
    state = {ns: sorted(store.items(ns) if ns in HEAVY else local.items(ns)) for ns in NAMESPACES}
    state["meta"] = [kv for kv in state["meta"] if kv[0] not in SHARD_META and not outbox.is_outbox_key(kv[0])]
    return state


def run(
    batches: Sequence[Sequence[Record]], shards: int, limits: RuntimeLimits | None = None, params: DedupeParams = PARAMS
) -> Outcome:
    """Decide ``batches`` on one MemoryStore (``shards == 0``) or on ``shards`` in-memory shards."""
    local = MemoryStore()
    store: KVStore = local if shards == 0 else sharded(local, shards, lambda i: MemoryStore())[0]
    engine = DedupeEngine(params, store, limits)
    events = drive(engine, batches)
    return events, snapshot(store, local), dict(sorted(engine.counters.items()))


def buckets(store: KVStore) -> tuple[np.ndarray, np.ndarray, list[tuple[bytes, np.ndarray]]]:
    """Every bucket (band, key) of the stored signatures, and each document's band keys."""
    params = resolve(PARAMS)
    rows = []
    for key, sig in store.items("sigs"):
        hashes = band_hashes(np.frombuffer(sig, dtype="<u4")[None, :], params.bands, params.rows)[0]
        rows.append((key, (hashes >> np.uint64(32)).astype(np.uint32)))
    keys = np.concatenate([r for _, r in rows])
    bands = np.tile(np.arange(params.bands, dtype=np.int32), len(rows))
    return bands, keys, rows


def members(shards: LocalShards | IndexShard, bands: np.ndarray, keys: np.ndarray) -> list[list[str]]:
    """The members of each bucket ``(bands[i], keys[i])`` (``members()`` answers ``(i of each, ids)``)."""
    out: list[list[str]] = [[] for _ in range(len(bands))]
    for i, member in zip(*shards.members(bands, keys), strict=True):
        out[i].append(member)
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    operations,
    st.lists(st.integers(1, 20), min_size=1, max_size=4),
    st.sampled_from(["estimate", "exact"]),
    st.sampled_from([1000, 2, 3]),
)
def test_a_sharded_engine_equals_the_unsharded_engine(
    ops: list[tuple[int, tuple[int, int, int, bool] | None]], sizes: list[int], verify: str, cap: int
) -> None:
    params = DedupeParams(verify=verify, boilerplate=BoilerplateConfig(min_docs=4))  # type: ignore[arg-type]
    records: list[Record] = []
    for number, spec in ops:
        doc_id = f"d{number:02d}"
        records.append(Deletion(doc_id) if spec is None else doc(doc_id, body(*spec), source="portal"))
    batches = split(records, sizes)
    limits = RuntimeLimits(max_bucket_size=cap)
    expected = run(batches, 0, limits, params)
    for shards in (1, 2, 4):
        events, state, counters = run(batches, shards, limits, params)
        assert events == expected[0], f"events differ at {shards} shards"
        assert state == expected[1], f"state differs at {shards} shards"
        assert counters == expected[2], f"counters differ at {shards} shards"


def test_the_index_is_split_between_the_gather_and_its_owner_shards() -> None:
    local = MemoryStore()
    stores = [MemoryStore() for _ in range(4)]
    store, client = sharded(local, 4, stores.__getitem__)
    engine = DedupeEngine(PARAMS, store)
    drive(engine, split(stream(), [9]))
    assert engine.counters["duplicates"] > 0 and engine.counters["exact_duplicates"] > 0
    assert all(not list(local.items(ns)) for ns in HEAVY)
    for i, shard_store in enumerate(stores):
        for ns in (*HEAVY, "docs"):
            held = [k for k, _ in shard_store.items(ns)]
            assert held, f"shard {i} holds no {ns}"
            assert all(owner(k, 4) == i for k in held), f"shard {i} holds another shard's {ns}"
    indexed = {k for k, raw in local.items("docs") if DocRecord.decode(raw).indexed}
    in_bands = [k for s in stores for k, _ in s.items("docs")]
    assert len(in_bands) == len(set(in_bands)) and set(in_bands) == indexed
    assert 0 < len(indexed) < local.count("docs")  # exact copies are kept out of the index
    # Each bucket answers exactly the indexed documents with that band key, each from its owner.
    bands, keys, rows = buckets(store)
    expected: dict[tuple[int, int], set[str]] = {}
    for key, band_keys in rows:
        if key in indexed:
            for band, band_key in enumerate(band_keys.tolist()):
                expected.setdefault((band, band_key), set()).add(key.decode())
    answers = members(client, bands, keys)
    assert all(len(found) == len(set(found)) for found in answers)
    got = {(b, k): set(found) for b, k, found in zip(bands.tolist(), keys.tolist(), answers, strict=True) if found}
    assert got == expected
    for i, part in enumerate(client.parts):
        assert all(owner(m.encode(), 4) == i for found in members(part, bands, keys) for m in found)


def test_rocksdb_shards_reopen_mid_stream(tmp_path: Path) -> None:
    batches = split(stream(), [7, 3])
    limits = RuntimeLimits(max_bucket_size=2)  # hot buckets: the shards must restore exactly who joined
    expected = run(batches, 0, limits)
    assert expected[2]["hot_bucket_skips"] > 0

    def open_all() -> tuple[ShardedStore, LocalShards, RocksStore]:
        local = RocksStore(tmp_path / "gather")
        store, client = sharded(local, 4, lambda i: RocksStore(tmp_path / f"shard{i}"))
        return store, client, local

    store, _, _ = open_all()
    half = len(batches) // 2
    events = drive(DedupeEngine(PARAMS, store, limits), batches[:half])
    store.close()
    store, client, local = open_all()
    engine = DedupeEngine(PARAMS, store, limits)
    events += drive(engine, batches[half:])
    assert events == expected[0]
    assert snapshot(store, local) == expected[1]
    bands, keys, _ = buckets(store)
    for part in client.parts:
        before = [sorted(found) for found in members(part, bands, keys)]
        assert any(before)
        part.rebuild()
        assert [sorted(found) for found in members(part, bands, keys)] == before
    part = client.parts[0]  # a bitmap of another width takes the one-document-at-a-time path
    before = [sorted(found) for found in members(part, bands, keys)]
    key, bitmap = next(iter(part.store.items("docs")))
    part.store.write({"docs": {key: bitmap + b"\0"}})
    part.rebuild()
    assert [sorted(found) for found in members(part, bands, keys)] == before
    store.close()


class CrashingShards(LocalShards):
    """Shards whose ``crash_at``-th apply reaches only the first ``reached`` shards, then raises."""

    def __init__(self, shards: int, open_store: Callable[[int], KVStore], crash_at: int, reached: int) -> None:
        super().__init__(shards, open_store)
        self.crash_at, self.reached, self.calls = crash_at, reached, 0

    def apply(self, number: int, ops: Sequence[ShardOps]) -> None:
        self.calls += 1
        if self.calls == self.crash_at:
            for part, shard_ops in zip(self.parts[: self.reached], ops, strict=False):
                part.apply(number, shard_ops)
            raise ConnectionError("shard unreachable")
        super().apply(number, ops)


def run_until_the_shards_crash(engine: DedupeEngine, batches: Sequence[Sequence[Record]]) -> tuple[list[bytes], int]:
    """The events up to the batch whose commit the shards failed, and that batch's index."""
    events: list[bytes] = []
    for number, batch in enumerate(batches):
        events.extend(orjson.dumps(e) for e in engine.process(batch))
        try:
            engine.commit()
        except ConnectionError:
            return events, number
    raise AssertionError("the shards never crashed")


@pytest.mark.parametrize(
    ("crash_at", "reached", "carry_on"),
    [(1, 0, False), (3, 0, False), (4, 2, False), (7, 3, False), (3, 1, True)],
)
def test_a_crash_between_the_gathers_write_and_the_shards_loses_nothing(
    crash_at: int, reached: int, carry_on: bool
) -> None:
    batches = split(stream(), [8])
    limits = RuntimeLimits(max_bucket_size=2)
    expected = run(batches, 0, limits)
    local = MemoryStore()
    stores = [MemoryStore() for _ in range(4)]
    client = CrashingShards(4, stores.__getitem__, crash_at, reached)
    engine = DedupeEngine(PARAMS, ShardedStore(local, client), limits)
    events, crashed = run_until_the_shards_crash(engine, batches)
    assert client.applied() == [crash_at] * reached + [crash_at - 1] * (4 - reached)
    resume = crashed + 1
    if carry_on:  # the caller caught the error and goes on with the same engine
        try:
            more = [orjson.dumps(e) for e in engine.process(batches[resume])]
            engine.commit()
            events, resume = events + more, resume + 1
        except StateError as exc:  # refused: the restart below finishes the commit
            assert "reopen the state" in str(exc)
    store, _ = sharded(local, 4, stores.__getitem__)  # a restart: same stores, new shards and engine
    events += drive(DedupeEngine(PARAMS, store, limits), batches[resume:])
    assert events == expected[0]
    assert snapshot(store, local) == expected[1]


def test_a_crash_with_an_outbox_cut_into_parts_loses_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker's changelog record holds ~1 MB: a bigger outbox is stored in parts, all in the commit's write."""
    monkeypatch.setattr(outbox, "OUTBOX_PART_BYTES", 997)  # every commit of this stream is cut
    batches = split(stream(), [8])
    limits = RuntimeLimits(max_bucket_size=2)
    expected = run(batches, 0, limits)
    local, stores = MemoryStore(), [MemoryStore() for _ in range(4)]
    engine = DedupeEngine(PARAMS, ShardedStore(local, CrashingShards(4, stores.__getitem__, 3, 1)), limits)
    events, crashed = run_until_the_shards_crash(engine, batches)
    raw, parts = read_outbox(lambda keys: local.get_many("meta", keys))
    assert raw is not None and parts > 1
    assert all(len(v) <= 997 for k, v in local.items("meta") if outbox.is_outbox_key(k))
    assert decode_all(raw)[0] == 3  # the crashed commit, whole
    store, _ = sharded(local, 4, stores.__getitem__)  # a restart replays it from the parts
    events += drive(DedupeEngine(PARAMS, store, limits), batches[crashed + 1 :])
    assert events == expected[0]
    assert snapshot(store, local) == expected[1]


def test_an_outbox_in_parts_round_trips_and_a_smaller_one_deletes_the_rest() -> None:
    meta = MemoryStore()

    def stored() -> tuple[bytes | None, int]:
        return read_outbox(lambda keys: meta.get_many("meta", keys))

    big = bytes(range(256)) * 10
    meta.write({"meta": outbox_writes(big, 0, part_bytes=1000)})
    assert stored() == (big, 3)
    assert all(len(v) <= 1000 for _, v in meta.items("meta"))
    meta.write({"meta": outbox_writes(b"small", 3, part_bytes=1000)})
    assert stored() == (b"small", 1)
    assert [k for k, _ in meta.items("meta")] == [OUTBOX_KEY]  # the parts and their count are gone
    assert outbox_writes(b"small", 1, part_bytes=1000) == {OUTBOX_KEY: b"small"}  # one key, as before parts
    meta.write({"meta": outbox_writes(big, 1, part_bytes=1000)})
    meta.write({"meta": {part_key(2): None}})
    with pytest.raises(StateError, match=r"lacks parts \[2\] of 3"):
        stored()
    assert OUTBOX_PARTS_KEY in dict(meta.items("meta"))


def test_a_shard_applies_each_commit_once() -> None:
    store = MemoryStore()
    shard = IndexShard(store, 0, 1, 4, 2)
    assert shard.apply(1, ShardOps({"sigs": {b"a": b"1"}}))
    assert not shard.apply(1, ShardOps({"sigs": {b"a": b"2", b"b": b"3"}}))
    assert list(store.items("sigs")) == [(b"a", b"1")]
    with pytest.raises(StateMismatchError, match="holds commit 1 and was sent commit 3"):
        shard.apply(3, ShardOps({"sigs": {b"c": b"4"}}))
    assert shard.applied == 1 and IndexShard(store, 0, 1, 4, 2).applied == 1


def test_the_window_applies_a_removal_to_a_bucket_loaded_later_and_caps_whole_buckets() -> None:
    fetched: list[int] = []

    def fetch(bands: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, list[str]]:
        fetched.append(len(bands))  # every bucket holds "a" (shard 0) and "b" (shard 1)
        return np.repeat(np.arange(len(bands), dtype=np.int32), 2), ["a", "b"] * len(bands)

    window = BandWindow(2, 1, 3, fetch, lambda doc_id: int(doc_id != "a"), 2)
    hashes = np.array([5 << 32, 9 << 32], dtype=np.uint64)
    window.remove("a", hashes)  # its buckets are not loaded yet
    assert fetched == [] and window.add("c", hashes) == ({"b"}, 0)
    assert window.add("d", hashes) == ({"b", "c"}, 0) and window.add("e", hashes) == ({"b", "c", "d"}, 2)
    assert window.query(hashes) == {"b", "c", "d"} and fetched == [2]
    ops = window.take_ops()
    assert [(op.index, op.doc_id, op.bands.tolist(), op.keys.tolist()) for op in ops[0].bands] == [
        (False, "a", [0, 1], [5, 9])
    ]
    assert [(op.doc_id, op.bands.tolist()) for op in ops[1].bands] == [("c", [0, 1]), ("d", [0, 1]), ("e", [])]
    assert window.query(hashes) == {"a", "b"} and fetched == [2, 2]  # a fresh window reads the shards again


def test_errors_say_how_to_fix_a_mismatched_layout() -> None:
    local = MemoryStore()
    stores = [MemoryStore() for _ in range(2)]
    store, _ = sharded(local, 2, stores.__getitem__)
    drive(DedupeEngine(PARAMS, store), split(stream()[:30], [10]))
    with pytest.raises(StateMismatchError, match="built with 2 index shards, not 4: open it with --index-shards 2"):
        sharded(local, 4, lambda i: MemoryStore())

    def first_use(store: ShardedStore) -> None:
        """Building an engine reaches no shard; its first batch with a new document does (``ShardedStore.connect``).

        (A batch of unchanged re-crawls needs no shard: it is decided from the local records.)
        """
        DedupeEngine(PARAMS, store).process(split(stream()[30:35], [5])[0])

    swapped, _ = sharded(local, 2, lambda i: stores[1 - i])
    with pytest.raises(StateMismatchError, match="open each shard's own directory"):
        first_use(swapped)
    more = [*stores, MemoryStore(), MemoryStore()]
    with pytest.raises(StateMismatchError, match=r"'shards': 2.*'shards': 4.*with the shard count"):
        first_use(sharded(MemoryStore(), 4, more.__getitem__)[0])
    with pytest.raises(StateMismatchError, match=r"the gather's state has none.*give the shards empty directories"):
        first_use(sharded(MemoryStore(), 2, stores.__getitem__)[0])


def same_ops(a: ShardOps, b: ShardOps) -> bool:
    def bands(ops: ShardOps) -> list[tuple[bool, str, list[int], list[int]]]:
        return [(op.index, op.doc_id, op.bands.tolist(), op.keys.tolist()) for op in ops.bands]

    return a.kv == b.kv and bands(a) == bands(b) and all(op.keys.dtype == np.uint32 for op in b.bands)


def sample_ops() -> ShardOps:
    def op(index: bool, doc_id: str, bands: list[int], keys: list[int]) -> BandOp:
        return BandOp(index, doc_id, np.array(bands, dtype=np.int32), np.array(keys, dtype=np.uint32))

    kv: dict[str, dict[bytes, bytes | None]] = {
        "sigs": {"dé".encode(): b"\x00\x01" * 8, b"gone": None},
        "sets": {b"e": b""},
    }
    return ShardOps(
        kv, [op(True, "dé-文書-🙂", [0, 3, 17], [0, 7, 2**32 - 1]), op(False, "p", [5], [9]), op(True, "n", [], [])]
    )


def test_change_sets_round_trip_through_their_byte_form() -> None:
    ops = sample_ops()
    assert same_ops(ops, ShardOps.decode(ops.encode()))
    assert same_ops(ShardOps(), ShardOps.decode(ShardOps().encode())) and not ShardOps()
    number, decoded = decode_all(encode_all(42, [ops, ShardOps(), ops]))
    assert number == 42 and len(decoded) == 3
    assert same_ops(ops, decoded[0]) and same_ops(ShardOps(), decoded[1]) and same_ops(ops, decoded[2])
    raw = ops.encode()
    with pytest.raises(StateError, match="bad magic"):
        ShardOps.decode(b"XXXX" + raw[4:])
    with pytest.raises(StateError, match="does not end where"):
        ShardOps.decode(raw + b"\x00")


def test_a_truncated_change_set_raises_state_error() -> None:
    raw = sample_ops().encode()
    for cut in range(4, len(raw)):
        with pytest.raises(StateError):
            ShardOps.decode(raw[:cut])
    with pytest.raises(StateError):
        decode_all(encode_all(1, [sample_ops()])[:-5])


def test_shard_band_tables_agree_with_a_dict_model() -> None:
    rng = np.random.default_rng(5)
    tables = ShardBandIndex(4, 2, capacity=64)
    model: dict[tuple[int, int], list[int]] = {}

    def check() -> None:
        wanted = sorted({*model, (0, 999_999), (3, 2**32 - 1)})
        bands = np.array([b for b, _ in wanted], dtype=np.int32)
        keys = np.array([k for _, k in wanted], dtype=np.uint32)
        idx, ordinals = tables.members(bands, keys)
        got: dict[tuple[int, int], list[int]] = {}
        for i, ordinal in zip(idx.tolist(), ordinals.tolist(), strict=True):
            got.setdefault(wanted[i], []).append(ordinal)
        assert {k: sorted(v) for k, v in got.items()} == {k: sorted(v) for k, v in model.items() if v}

    ordinal = 0
    for size in (10, 50, 300, 2000, 17000):  # the last batch, all in band 0, outgrows 16k slots
        bands = rng.integers(0, 4, size).astype(np.int32) if size < 17000 else np.zeros(size, dtype=np.int32)
        pool = rng.integers(0, 2**32, max(size // 4, 30), dtype=np.uint64).astype(np.uint32)
        keys = rng.choice(pool, size)  # few keys: several entries per bucket
        ordinals = np.arange(ordinal, ordinal + size, dtype=np.int32)
        ordinal += size
        tables.insert_entries(bands, keys, ordinals)
        for b, k, o in zip(bands.tolist(), keys.tolist(), ordinals.tolist(), strict=True):
            model.setdefault((b, k), []).append(o)
        check()
        gone = set(rng.choice(ordinal, size // 3, replace=False).tolist())
        entries = [(b, k, o) for (b, k), live in model.items() for o in live if o in gone]
        removed = tables.remove_entries(
            np.array([e[0] for e in entries] + [1], dtype=np.int32),
            np.array([e[1] for e in entries] + [7], dtype=np.uint32),
            np.array([e[2] for e in entries] + [ordinal + 5], dtype=np.int32),  # and one that is not there
        )
        assert removed == len(entries)
        for b, k, o in entries:
            model[(b, k)].remove(o)
        check()
    assert tables.capacity > 16384
