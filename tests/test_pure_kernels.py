"""The pure numpy/mmh3 kernels give the compiled kernels' values bit for bit, and datasketch's."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from datasketch import MinHash

from stream_dedupe.config import ShingleSpec
from stream_dedupe.core import bandindex, jit, kernels, lsh
from stream_dedupe.core import pure_kernels as pure
from stream_dedupe.core.minhash import datasketch_permutations, pack
from stream_dedupe.core.normalize import Normalizer
from stream_dedupe.core.shingle import SHINGLE_HASH_SEED, shingle_hash, shingles

from .mixed_corpus import write_mixed

ALPHABET = "abcdefghij klmnop  qrstuvwxyz0123456789 .,;!?-_\t\n'\"éßüñçÅ日本語テキスト한국어Ωж🎉\u0301\u200bＦｕｌｌ"


def random_texts(n: int, seed: int = 11) -> list[str]:
    rng = random.Random(seed)
    texts = ["", " ", "a", "one two", "   lead  and   trail  ", "日本語", "🎉🎉🎉 🎉", "x" * 5000]
    texts.append(" ".join(f"tok{i % 97}" for i in range(6000)))  # long
    while len(texts) < n:
        size = rng.choice([1, 3, 10, 60, 400, 2000])
        texts.append("".join(rng.choice(ALPHABET) for _ in range(size)))
    return texts


@pytest.fixture(scope="module")
def compiled() -> None:
    jit.enable()


@pytest.fixture(scope="module")
def normalized() -> list[str]:
    normalizer = Normalizer()
    return [normalizer.normalize(t) for t in random_texts(400)]


SPECS = [
    ShingleSpec("word", 1),
    ShingleSpec("word", 3),
    ShingleSpec("word", 5),
    ShingleSpec("char", 4),
    ShingleSpec("char", 7),
]


@pytest.mark.parametrize("spec", SPECS, ids=str)
def test_shingle_hashes_and_signatures_equal_the_kernels(
    compiled: None, normalized: list[str], spec: ShingleSpec
) -> None:
    buf, offsets = pack([t.encode() for t in normalized])
    kind = kernels.WORD if spec.kind == "word" else kernels.CHAR
    want_h, want_b = kernels.shingle_hashes(buf, offsets, kind, spec.size, SHINGLE_HASH_SEED)
    got_h, got_b = pure.shingle_hashes(buf, offsets, kind, spec.size, SHINGLE_HASH_SEED)
    assert got_h.dtype == want_h.dtype and got_b.dtype == want_b.dtype
    assert np.array_equal(got_h, want_h) and np.array_equal(got_b, want_b)
    for num_perm, seed in ((128, 1), (64, 42)):
        a, b = datasketch_permutations(num_perm, seed)
        want = kernels.minhash_signatures(want_h, want_b, a, b)
        got = pure.minhash_signatures(got_h, got_b, a, b)
        assert got.dtype == np.uint32 and np.array_equal(got, want)


@pytest.mark.parametrize("spec", SPECS, ids=str)
def test_pure_signatures_equal_datasketch(normalized: list[str], spec: ShingleSpec) -> None:
    buf, offsets = pack([t.encode() for t in normalized[:150]])
    kind = pure.WORD if spec.kind == "word" else pure.CHAR
    hashes, bounds = pure.shingle_hashes(buf, offsets, kind, spec.size, SHINGLE_HASH_SEED)
    a, b = datasketch_permutations(128, 1)
    sigs = pure.minhash_signatures(hashes, bounds, a, b)
    for text, sig in zip(normalized[:150], sigs, strict=True):
        oracle = MinHash(num_perm=128, seed=1, hashfunc=shingle_hash)
        oracle.update_batch(shingles(text, spec))
        assert np.array_equal(oracle.hashvalues, sig), text[:40]


def test_murmur_words_equal_the_kernels(compiled: None) -> None:
    for data in (b"", b"a", b"ab", b"abc", b"abcd", b"abcde", "日本語 テキスト".encode(), bytes(range(256))):
        buf = np.frombuffer(data, dtype=np.uint8)
        words = pure.le_words(buf)
        assert np.array_equal(words, kernels.le_words(buf))
        for start, end in ((0, len(data)), (1, len(data)), (0, len(data) // 2)):
            if start <= end:
                want = kernels.shingle_hashes(buf[start:end].copy(), np.array([0, end - start]), 1, 10**6, 7)[0]
                assert pure.murmur3_32(words, start, end, 7) == (
                    want[0] if len(want) else pure.murmur3_32(words, 0, 0, 7)
                )


def test_compact_spaces_and_text_stats_equal_the_kernels(compiled: None) -> None:
    rng = random.Random(5)
    raw = [t.encode() for t in random_texts(300)] + [
        b"",
        b"    ",
        b" a  b ",
        bytes(rng.choice(b" ab") for _ in range(999)),
    ]
    buf, offsets = pack(raw)
    want = kernels.compact_spaces(buf, offsets)
    got = pure.compact_spaces(buf, offsets)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
    for got_stat, want_stat in zip(pure.text_stats(*want), kernels.text_stats(*want), strict=True):
        assert np.array_equal(got_stat, want_stat)


def test_pure_batch_normalization_equals_normalize(normalized: list[str]) -> None:
    texts = random_texts(400)
    buf, offsets = pure.compact_spaces(*pack([Normalizer().normalize(t).encode() for t in texts]))
    data = buf.tobytes()
    assert [data[offsets[i] : offsets[i + 1]].decode() for i in range(len(texts))] == normalized


@pytest.mark.parametrize(("bands", "rows"), [(18, 7), (16, 8), (1, 1), (32, 4)])
def test_band_hashes_equal_the_kernel(compiled: None, bands: int, rows: int) -> None:
    sigs = np.random.default_rng(bands).integers(0, 1 << 32, (200, bands * rows), dtype=np.uint32)
    assert np.array_equal(pure.band_hashes(sigs, bands, rows), lsh._band_hashes(sigs, bands, rows))


def test_band_tables_interpreted_equal_compiled(compiled: None) -> None:
    """The band-table kernels run as Python (pure mode) give the compiled results, step for step."""
    rng = np.random.default_rng(3)
    hashes = rng.integers(0, 1 << 64, (300, 18), dtype=np.uint64)
    hashes[100:150] = hashes[:50]  # shared buckets
    tables = []
    for _ in range(2):
        tables.append((np.zeros((18, 64), dtype=np.uint32), np.full((18, 64), -1, dtype=np.int32)))
    out_a, out_b = np.empty(18 * 4, dtype=np.int32), np.empty(18 * 4, dtype=np.int32)
    skip_a, skip_b = np.zeros(18, dtype=np.uint8), np.zeros(18, dtype=np.uint8)
    skipped = 0
    for i in [*range(30), *range(100, 116)]:  # the last 16 share the buckets of 0-15, full at a cap of 1
        cap = 4 if i < 100 else 1
        got = bandindex._query_insert.py_func(*tables[0], hashes[i], i, cap, True, out_a, skip_a)
        want = bandindex._query_insert(*tables[1], hashes[i], i, cap, True, out_b, skip_b)
        skipped += int(skip_b.sum())
        assert tuple(map(int, got)) == tuple(map(int, want)) and np.array_equal(out_a[: got[0]], out_b[: want[0]])
        assert np.array_equal(skip_a, skip_b) and int(skip_a.sum()) == int(got[1])
    masks = (hashes[130:136, :] & np.uint64(1)).astype(np.uint8)
    bandindex._insert_masked.py_func(*tables[0], hashes[130:136], 130, masks)
    bandindex._insert_masked(*tables[1], hashes[130:136], 130, masks)
    assert np.array_equal(tables[0][1], tables[1][1]) and np.array_equal(tables[0][0], tables[1][0])
    sizes = bandindex._bucket_sizes.py_func(*tables[0], hashes[0])
    assert np.array_equal(sizes, bandindex._bucket_sizes(*tables[1], hashes[0])) and skipped == 16 * 18
    assert np.array_equal(
        bandindex._query_many.py_func(*tables[0], hashes[:40]), bandindex._query_many(*tables[1], hashes[:40])
    )
    assert int(bandindex._remove.py_func(*tables[0], hashes[3], 3)) == int(bandindex._remove(*tables[1], hashes[3], 3))
    grown = [(np.zeros((18, 128), dtype=np.uint32), np.full((18, 128), -1, dtype=np.int32)) for _ in range(2)]
    assert int(bandindex._rehash.py_func(*tables[0], *grown[0])) == int(bandindex._rehash(*tables[1], *grown[1]))
    (ka, va), (kb, vb) = grown
    assert np.array_equal(ka, kb) and np.array_equal(va, vb)


def _dedupe(tmp: Path, name: str, corpus: Path, deletions: Path, mode: str) -> bytes:
    env = {**os.environ, "STREAM_DEDUPE_JIT": mode}
    events = tmp / f"{name}.jsonl"
    cmd = [
        sys.executable,
        "-m",
        "stream_dedupe",
        "dedupe",
        str(corpus),
        "--state",
        str(tmp / name),
        "--events",
        str(events),
        "--deletions",
        str(deletions),
        "--no-progress",
        "--batch-size",
        "37",
        "--boilerplate-min-docs",
        "5",
    ]
    result = subprocess.run(cmd, capture_output=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr.decode()
    return events.read_bytes()


def test_pure_and_compiled_runs_emit_the_same_events(tmp_path: Path) -> None:
    corpus, deletions = write_mixed(tmp_path)
    pure_events = _dedupe(tmp_path, "pure", corpus, deletions, "off")
    compiled_events = _dedupe(tmp_path, "compiled", corpus, deletions, "on")
    assert pure_events == compiled_events
    kinds = {line.split(b'"event":"')[1].split(b'"')[0] for line in pure_events.splitlines()}
    assert {b"new", b"duplicate-of", b"invalid", b"deleted"} <= kinds, kinds


def test_line_form_pure_equals_the_kernel(compiled: None) -> None:
    from stream_dedupe.core import lineform

    rng = random.Random(5)
    lines = ["", " ", "  --  ", "Copyright (c) 2026 ACME, Inc.", "a", "A  b\tC", "x" * 3000]
    lines += ["".join(rng.choice("aB3 -_.,\t!Zz9") for _ in range(rng.choice([1, 5, 40, 300]))) for _ in range(300)]
    for line in lines:
        data = np.frombuffer(line.encode("ascii"), dtype=np.uint8)
        out_pure = np.zeros(max(data.shape[0], 1), dtype=np.uint8)
        out_jit = np.zeros(max(data.shape[0], 1), dtype=np.uint8)
        n_pure = lineform._form_pure(data, lineform._TABLE, out_pure)
        n_jit = lineform._form(data, lineform._TABLE, out_jit)
        assert n_pure == n_jit, line
        assert out_pure[:n_pure].tobytes() == out_jit[:n_jit].tobytes(), line


def test_sorted_intersection_pure_equals_the_kernel(compiled: None) -> None:
    from stream_dedupe.core import verify

    rng = np.random.default_rng(3)
    u32 = np.uint32
    cases = [(np.array([], u32), np.array([1], u32)), (np.array([2, 1], u32), np.array([1], u32))]
    cases.append((np.array([1, 1, 2], np.uint32), np.array([1, 2], np.uint32)))  # not strictly increasing
    for _ in range(200):
        a = np.unique(rng.integers(0, 2000, rng.integers(0, 300)).astype(np.uint32))
        b = np.unique(rng.integers(0, 2000, rng.integers(0, 300)).astype(np.uint32))
        cases.append((a, b))
    for a, b in cases:
        assert verify._sorted_intersection_pure(a, b) == verify._sorted_intersection(a, b)
    assert verify._sorted_intersection_pure(cases[1][0], cases[1][1]) == -1


def test_unique_segments_equal_numpy_unique_per_document(compiled: None, normalized: list[str]) -> None:
    buf, offsets = pack([t.encode() for t in normalized])
    hashes, bounds = kernels.shingle_hashes(buf, offsets, kernels.WORD, 1, SHINGLE_HASH_SEED)
    rng = np.random.default_rng(5)
    cases = [
        (hashes, bounds),  # real shingles: many repeats (word:1), empty documents
        (np.zeros(0, dtype=np.uint32), np.zeros(3, dtype=np.int64)),  # three empty documents
        (np.full(50, 7, dtype=np.uint32), np.array([0, 1, 50], dtype=np.int64)),  # one value repeated
        (rng.integers(0, 2**32, 5000, dtype=np.uint32), np.array([0, 0, 2500, 4999, 5000], dtype=np.int64)),
        (np.array([2**32 - 1, 0, 2**32 - 1, 0], dtype=np.uint32), np.array([0, 2, 4], dtype=np.int64)),
    ]
    for h, b in cases:
        want = [np.unique(h[b[d] : b[d + 1]]) for d in range(len(b) - 1)]
        for impl in (kernels.unique_segments, pure.unique_segments):
            sets, set_bounds = impl(h, b)
            assert sets.dtype == np.uint32 and set_bounds.dtype == np.int64
            got = [sets[set_bounds[d] : set_bounds[d + 1]] for d in range(len(b) - 1)]
            assert all(np.array_equal(g, w) for g, w in zip(got, want, strict=True)), impl


def test_insert_capped_interpreted_equals_compiled(compiled: None) -> None:
    rng = np.random.default_rng(4)
    hashes = rng.integers(0, 1 << 64, (200, 6), dtype=np.uint64)
    hashes[50:120] = hashes[0]
    tables = [(np.zeros((6, 512), dtype=np.uint32), np.full((6, 512), -1, dtype=np.int32)) for _ in range(2)]
    got = bandindex._insert_capped.py_func(*tables[0], hashes, 7, 30)
    want = bandindex._insert_capped(*tables[1], hashes, 7, 30)
    assert int(got) == int(want) > 0
    assert all(np.array_equal(a, b) for a, b in zip(tables[0], tables[1], strict=True))


def test_sorted_intersections_pure_equals_the_kernel(compiled: None) -> None:
    from stream_dedupe.core import verify

    rng = np.random.default_rng(4)
    for _ in range(100):
        sets = [
            np.unique(rng.integers(0, 500, rng.integers(0, 120)).astype(np.uint32)) for _ in range(rng.integers(0, 6))
        ]
        if sets and rng.random() < 0.3:
            sets[0] = sets[0][::-1].copy()  # not increasing: -1 for that one only
        flat = np.concatenate(sets) if sets else np.array([], np.uint32)
        ends = np.cumsum([s.size for s in sets], dtype=np.int64)
        a = np.unique(rng.integers(0, 500, rng.integers(0, 120)).astype(np.uint32))
        if rng.random() < 0.1:
            a = np.array([3, 3], np.uint32)  # not strictly increasing: -1 for every set
        pure, jit_ = verify._sorted_intersections_pure(a, flat, ends), verify._sorted_intersections(a, flat, ends)
        assert pure.tolist() == jit_.tolist()
        assert pure.tolist() == [verify._sorted_intersection_pure(a, s) for s in sets]
