"""Our batched MinHash against datasketch as the oracle."""

from __future__ import annotations

import mmh3
import numpy as np
import pytest
from datasketch import MinHash
from hypothesis import given, settings
from hypothesis import strategies as st

from stream_dedupe.config import ShingleSpec
from stream_dedupe.core import kernels
from stream_dedupe.core.minhash import MinHasher, pack
from stream_dedupe.core.normalize import Normalizer
from stream_dedupe.core.shingle import shingle_hash, shingles

TEXTS = [
    "",
    "a",
    "one two",
    "the quick brown fox jumps over the lazy dog again and again",
    "naïve café 日本語 テキスト über straße",
    " ".join(f"tok{i % 37}" for i in range(400)),
]


@pytest.mark.parametrize(
    "spec",
    [
        ShingleSpec("word", 1),
        ShingleSpec("word", 3),
        ShingleSpec("word", 5),
        ShingleSpec("char", 4),
        ShingleSpec("char", 7),
    ],
)
@pytest.mark.parametrize(("num_perm", "seed"), [(128, 1), (64, 42), (256, 7)])
def test_signatures_bit_identical_to_datasketch(spec: ShingleSpec, num_perm: int, seed: int) -> None:
    hasher = MinHasher(num_perm, seed, spec)
    sigs = hasher.signatures([t.encode() for t in TEXTS])
    for text, sig in zip(TEXTS, sigs, strict=True):
        oracle = MinHash(num_perm=num_perm, seed=seed, hashfunc=shingle_hash)
        oracle.update_batch(shingles(text, spec))
        assert oracle.hashvalues.dtype == np.uint32
        assert np.array_equal(oracle.hashvalues, sig), (spec, text[:30])


def test_signatures_on_real_corpus_match_datasketch(newsgroups: list[dict[str, object]]) -> None:
    normalizer = Normalizer()
    texts = [normalizer.normalize(str(d["text"])) for d in newsgroups[:300]]
    spec = ShingleSpec("word", 3)
    sigs = MinHasher(128, 1, spec).signatures([t.encode() for t in texts])
    for text, sig in zip(texts, sigs, strict=True):
        oracle = MinHash(num_perm=128, seed=1, hashfunc=shingle_hash)
        oracle.update_batch(shingles(text, spec))
        assert np.array_equal(oracle.hashvalues, sig)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64))
def test_murmur3_kernel_matches_mmh3(data: bytes) -> None:
    buf = np.frombuffer(data, dtype=np.uint8) if data else np.zeros(0, dtype=np.uint8)
    words = kernels.le_words(buf)
    assert int(kernels.murmur3_32(words, 0, len(data), 0)) == mmh3.hash(data, 0, signed=False)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(alphabet="abcé日 ", max_size=40), max_size=6), st.integers(1, 6))
def test_kernel_shingles_are_the_reference_shingles(texts: list[str], k: int) -> None:
    normalizer = Normalizer()
    normalized = [normalizer.normalize(t) for t in texts]
    for kind in ("word", "char"):
        spec = ShingleSpec(kind, k)  # type: ignore[arg-type]
        hashes, bounds = MinHasher(16, 1, spec).shingle_hashes([t.encode() for t in normalized])
        for i, text in enumerate(normalized):
            expected = [shingle_hash(s) for s in shingles(text, spec)]
            assert hashes[bounds[i] : bounds[i + 1]].tolist() == expected


def test_pack_empty_batch() -> None:
    buf, offsets = pack([])
    assert buf.size == 0 and offsets.tolist() == [0]


@pytest.mark.parametrize("num_perm", [16, 64, 127, 128, 256, 1024])
@pytest.mark.parametrize("seed", [0, 1, 2, 42, 12345, 2**32 - 1])
def test_permutations_are_datasketchs_without_importing_it(num_perm: int, seed: int) -> None:
    from stream_dedupe.core.minhash import datasketch_permutations

    a, b = datasketch_permutations(num_perm, seed)
    oracle_a, oracle_b = MinHash(num_perm=num_perm, seed=seed, scheme="affine32").permutations
    assert a.dtype == np.uint32 and b.dtype == np.uint32
    assert np.array_equal(a, oracle_a) and np.array_equal(b, oracle_b)
    assert np.all(a % 2 == 1)
