from __future__ import annotations

import numpy as np

from stream_dedupe.core.bandindex import BandIndex
from stream_dedupe.core.lshindex import LshIndex


def random_sigs(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 2**32, size=(n, 64), dtype=np.uint64).astype(np.uint32)


def test_finds_what_shares_a_band_and_survives_growth() -> None:
    index = BandIndex(8, 8, capacity=16)
    sigs = random_sigs(3000)
    hashes = index.hashes(sigs)
    for i in range(3000):
        found, full = index.query_insert(hashes[i], i, cap=100)
        assert found.size == 0 and full == 0
    assert index.capacity >= 4096  # grew several times, entries kept
    probe = sigs[1234].copy()
    probe[8:] += 1  # only band 0 is still equal
    found, _ = index.query_insert(index.hashes(probe[None, :])[0], 5000, cap=100, insert=False)
    assert found.tolist() == [1234]


def test_remove_and_cap() -> None:
    index = LshIndex(4, 4, bucket_cap=2)
    sig = random_sigs(1)
    hashes = index.hashes(sig)[0]
    assert index.add("a", hashes) == (set(), 0)
    assert index.add("b", hashes) == ({"a"}, 0)
    assert index.add("c", hashes) == ({"a", "b"}, 4)  # every bucket full: c is not indexed
    assert index.query(hashes) == {"a", "b"}
    index.remove("a", hashes)
    assert index.query(hashes) == {"b"}


def test_query_many_is_the_union_of_single_queries() -> None:
    index = LshIndex(8, 8, bucket_cap=10)
    sigs = random_sigs(200, seed=3)
    hashes = index.hashes(sigs)
    for i in range(100):
        index.add(f"d{i}", hashes[i])
    probes = hashes[[5, 50, 150]]
    assert index.query_many(probes) == {"d5", "d50"}
    assert index.query_many(probes) == set().union(*(index.query(p) for p in probes))


def _contents(index: LshIndex) -> list[set[tuple[int, int]]]:
    """Per band, the live (band key, ordinal) entries of the tables: independent of their capacity."""
    keys, vals = index.tables._keys, index.tables._vals
    return [{(int(k), int(v)) for k, v in zip(keys[b], vals[b], strict=True) if v >= 0} for b in range(keys.shape[0])]


def test_add_all_builds_the_tables_add_builds_one_at_a_time_caps_included() -> None:
    rng = np.random.default_rng(11)
    hashes = rng.integers(0, 1 << 64, (3000, 8), dtype=np.uint64)
    hashes[1000:1600] = hashes[0]  # 601 documents in the same buckets: past the cap of 50
    hashes[2000:2300, :3] = hashes[5, :3]  # some bands shared, others not
    ids = [f"d{i}" for i in range(len(hashes))]
    one, bulk = LshIndex(8, 4, bucket_cap=50), LshIndex(8, 4, bucket_cap=50)
    full_one = sum(one.add(i, row)[1] for i, row in zip(ids, hashes, strict=True))
    full_bulk = sum(bulk.add_all(ids[at : at + 700], hashes[at : at + 700]) for at in range(0, len(ids), 700))
    assert full_bulk == full_one > 0
    assert _contents(bulk) == _contents(one)
    for row in (hashes[0], hashes[5], hashes[2100], hashes[2999]):
        assert bulk.query(row) == one.query(row)
    assert len(bulk) == len(one) == len(ids)


def test_full_bands_name_the_buckets_at_the_cap() -> None:
    index = LshIndex(4, 4, bucket_cap=3)
    sig = random_sigs(2, seed=5)
    hashes = index.hashes(sig)
    probe = hashes[0].copy()
    probe[2:] = hashes[1][2:]  # bands 0-1 as document 0, bands 2-3 as document 1
    for i in range(3):
        index.add(f"a{i}", hashes[0])
    index.add("b0", hashes[1])
    assert index.tables.bucket_sizes(probe).tolist() == [3, 3, 1, 1]
    assert index.full_bands(probe).tolist() == [True, True, False, False]
    index.remove("a0", hashes[0])
    assert index.full_bands(probe).tolist() == [False, False, False, False]  # a removal reopens them
