"""The scale corpus generator (bench/corpus.py): seeded, streaming, with honest near-duplicate families."""

from __future__ import annotations

import zlib
from collections import Counter
from pathlib import Path

import numpy as np
import orjson
import pytest

from bench.corpus import KINDS, MIN_JACCARD, ScaleCorpus, components, doc_index, quality, truth_path, write_corpus
from stream_dedupe.config import ShingleSpec
from stream_dedupe.core.normalize import Normalizer
from stream_dedupe.core.shingle import shingles

N = 3000


@pytest.fixture(scope="module")
def corpus() -> ScaleCorpus:
    return ScaleCorpus(seed=7)


@pytest.fixture(scope="module")
def docs(corpus: ScaleCorpus) -> list[tuple[dict[str, object], int, int]]:
    return [(orjson.loads(d.raw), d.family, d.kinds) for d in corpus.documents(N)]


def _shingles(text: str) -> set[bytes]:
    return set(shingles(Normalizer().normalize(text), ShingleSpec.parse("word:3")))


def _jaccard(a: str, b: str) -> float:
    x, y = _shingles(a), _shingles(b)
    return len(x & y) / len(x | y)


def test_seeded_and_every_prefix_is_the_same(corpus: ScaleCorpus) -> None:
    a = [d.raw for d in ScaleCorpus(seed=7).documents(700)]
    b = [d.raw for d in corpus.documents(2500)]
    assert a == b[:700]  # the stream does not depend on N (and is the same across instances)
    assert [d.raw for d in ScaleCorpus(seed=8).documents(50)] != b[:50]


def test_sizes_ids_and_vocabulary(docs: list[tuple[dict[str, object], int, int]]) -> None:
    ids = [str(d["id"]) for d, _, _ in docs]
    assert len(set(ids)) == N and [doc_index(i) for i in ids] == list(range(N))
    assert ids != sorted(ids)  # hashed ids: the state's keys do not arrive in order
    texts = [str(d["text"]) for d, _, _ in docs]
    assert 1500 < np.mean([len(t) for t in texts]) < 1900  # ~1.7 KB
    words = Counter(w for t in texts for w in Normalizer().normalize(t).split())
    assert len(words) > 10000  # a real vocabulary, not synth.py's 40 words
    blob = "\n".join(texts).encode()
    assert len(zlib.compress(blob)) / len(blob) > 0.35  # compresses like prose, not like a loop


def test_families_and_variant_kinds(docs: list[tuple[dict[str, object], int, int]]) -> None:
    families = [f for _, f, _ in docs]
    variants = [(f, k) for _, f, k in docs if k]
    assert 0.25 < len(variants) / N < 0.35
    first: dict[int, int] = {}
    for i, (_, family, kinds) in enumerate(docs):
        if kinds == 0:
            assert family not in first and family == len(first)  # bases number the families in order
            first[family] = i
        else:
            assert family in first  # a variant copies an earlier family
    seen = Counter(name for _, k in variants for name, bit in KINDS.items() if k & bit)
    assert set(seen) == set(KINDS) and min(seen.values()) > 50
    assert any(bin(k).count("1") == 2 for _, k in variants)
    assert max(Counter(families).values()) >= 3


def test_every_variant_is_a_true_near_duplicate_of_its_base(
    corpus: ScaleCorpus, docs: list[tuple[dict[str, object], int, int]]
) -> None:
    base = {f: str(d["text"]) for d, f, k in docs if k == 0}
    similarities = [_jaccard(str(d["text"]), base[f]) for d, f, k in docs if k]
    assert min(similarities) >= MIN_JACCARD
    assert corpus.base_text(5) == base[5]  # the base is regenerated from its family alone
    # unrelated pages of one site (shared header or footer) stay far apart
    by_site: dict[object, list[str]] = {}
    for d, _, k in docs:
        if k == 0:
            by_site.setdefault(d["source"], []).append(str(d["text"]))
    pairs = [(t[0], t[1]) for t in by_site.values() if len(t) > 1]
    assert max(_jaccard(a, b) for a, b in pairs) < 0.2


def test_write_corpus_and_truth(tmp_path: Path, corpus: ScaleCorpus) -> None:
    path = tmp_path / "c.jsonl"
    info = write_corpus(path, 500, seed=7)
    lines = path.read_bytes().splitlines()
    assert len(lines) == 500 and info["bytes"] == path.stat().st_size
    truth = np.load(truth_path(path))
    expected = list(corpus.documents(500))
    assert lines == [d.raw for d in expected]
    assert truth["family"].tolist() == [d.family for d in expected]
    assert truth["kinds"].tolist() == [d.kinds for d in expected]


def test_pair_quality_against_families() -> None:
    family = np.array([0, 0, 0, 1, 1, 2])
    kinds = np.array([0, KINDS["edit"], KINDS["fwd"], 0, KINDS["edit"], 0], dtype=np.uint8)
    perfect = quality(np.array([0, 0, 0, 3, 3, 5]), family, kinds)
    assert (perfect["true_pairs"], perfect["recall"], perfect["precision"]) == (4, 1.0, 1.0)
    split = quality(np.array([0, 0, 2, 3, 3, 5]), family, kinds)  # one variant left alone
    assert (split["recall"], split["precision"]) == (0.5, 1.0)
    assert split["variant_recall_by_kind"]["fwd"] == 0.0 and split["variant_recall_by_kind"]["edit"] == 1.0
    merged = quality(np.array([0, 0, 0, 3, 3, 3]), family, kinds)  # an unrelated page joins family 1
    assert (merged["recall"], merged["precision"]) == (1.0, 0.6667)
    labels = components(np.array([[4, 3], [2, 0], [1, 2]]), 6)
    assert labels.tolist() == [0, 0, 0, 3, 3, 5]
