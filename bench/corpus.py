"""Seeded scale corpus: up to millions of ~1.7 KB documents with known near-duplicate families.

Unlike ``bench/synth.py`` (40 words: small, very compressible and self-similar text), the words
here come from a seeded vocabulary of 30,000 pseudo-words drawn with a Zipf law (frequent words
are short, as in natural language), so that compression ratios, shingle collisions and LSH
candidate rates are close to those of real prose.

* A **family** is a base page and its re-crawled copies. The base text of family ``f`` is a pure
  function of ``(seed, f)`` (counter-based hashing, vectorized in numpy), so the generator holds
  no document in memory and can pick any earlier family to copy: the stream is generated in
  O(1) memory, at ~20-30k documents/s, and every prefix of the stream is the same whatever N is.
* About ``dup_fraction`` of the documents are **variants** of a uniformly chosen earlier family,
  with one (70%) or two (30%) of these edits (:data:`KINDS`): ``edit`` (1-3 words replaced),
  ``timestamp`` (a "Last updated" line), ``fwd`` (``Fwd:`` title and first line), ``header`` /
  ``footer`` (the site's shared header or footer block added, or removed when the base has it),
  ``truncate`` (the last 3-7% cut at a word boundary). Sizes are chosen so that every variant has
  word-3-gram Jaccard >= :data:`MIN_JACCARD` with its base (checked by ``tests/test_bench_corpus.py``
  and measured on a sample by ``bench/bench_scale.py``).
* Unrelated pages of one site share its header or footer (20 sites), the classic source of false
  near-duplicates.

The ground truth (family and variant kinds of each document) is not in the JSON: it is written
beside it (``<out>.truth.npz``), so that the stored documents have the size of real ones.

    python bench/corpus.py --docs 1000000 --out /tmp/scale.jsonl
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass
from operator import itemgetter
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from stream_dedupe.quality.metrics import components as quality_components

#: Variant edits, as bits of the ``kinds`` ground-truth array (0 = a base document).
KINDS = {"edit": 1, "timestamp": 2, "fwd": 4, "header": 8, "footer": 16, "truncate": 32}
#: Word-3-gram Jaccard (after the engine's normalization) of every variant with its base, at least.
MIN_JACCARD = 0.8
SITES = 20
_TABLE_BITS = 22
_MAX_TOKENS = 512
_ONSETS = [
    *"bcdfghjklmnprstvwz",
    "br",
    "ch",
    "cl",
    "cr",
    "dr",
    "fl",
    "gr",
    "pl",
    "pr",
    "sh",
    "sl",
    "st",
    "str",
    "th",
    "tr",
]
_ONSETS += [""] * 4
_NUCLEI = [*"aeiouaeio", "ai", "ea", "ee", "io", "ou", "y"]
_CODAS = ["", "", "", "n", "r", "s", "t", "l", "m", "nd", "st", "ng", "ck", "x", "rt"]


def _mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finalizer, elementwise on uint64 (wrapping arithmetic)."""
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _vocabulary(rng: random.Random, size: int) -> list[str]:
    """``size`` distinct pseudo-words ordered by rank (frequent first, and shorter), ~3% numbers."""
    words: set[str] = set()
    out: list[str] = []
    while len(out) < size:
        rank = len(out)
        if rank > 50 and rng.random() < 0.03:
            word = str(rng.choice([rng.randint(0, 99), rng.randint(100, 9999), rng.randint(1990, 2030)]))
        else:
            syllables = 1 if rank < 300 else rng.choice([1, 2]) if rank < 3000 else rng.choice([2, 2, 2, 3])
            word = "".join(rng.choice(_ONSETS) + rng.choice(_NUCLEI) + rng.choice(_CODAS) for _ in range(syllables))
        if word not in words:
            words.add(word)
            out.append(word)
    return out


def _zipf_table(size: int, exponent: float) -> np.ndarray:
    """A table of 2**22 ranks in which rank r appears in proportion to 1 / (r + 1) ** exponent."""
    weights = 1.0 / np.arange(1, size + 1, dtype=np.float64) ** exponent
    slots = 1 << _TABLE_BITS
    counts = np.maximum(1, np.floor(weights / weights.sum() * (slots - size)).astype(np.int64))
    counts[0] += slots - counts.sum()
    return np.repeat(np.arange(size, dtype=np.int32), counts)


@dataclass(frozen=True)
class Doc:
    """One generated document: its JSON line and its ground truth."""

    raw: bytes
    family: int
    kinds: int


class ScaleCorpus:
    """The generator; see the module docstring.

    Args:
        seed: Everything (vocabulary, texts, families, edits) derives from it.
        dup_fraction: Share of documents that are variants of an earlier family.
        size: Mean characters of a base text (uniform in ``size +- 25%``).
        vocab_size: Distinct words.
        zipf: Zipf exponent of word frequencies.

    """

    def __init__(
        self, seed: int = 1, dup_fraction: float = 0.3, size: int = 1600, vocab_size: int = 30000, zipf: float = 1.0
    ) -> None:
        self.seed, self.dup_fraction, self.size = seed, dup_fraction, size
        rng = random.Random(f"vocabulary-{seed}")
        self.vocab = _vocabulary(rng, vocab_size)
        self._word_len = np.array([len(w) + 1 for w in self.vocab], dtype=np.int32)
        self._table = _zipf_table(vocab_size, zipf)
        # each word as it appears in text: (sentence start?) x (followed by " ", ". " or ".\n\n")
        self._pieces = [
            (w.capitalize() if first else w) + sep
            for first in (0, 1)
            for sep in (" ", ". ", ".\n\n")
            for w in self.vocab
        ]
        self._key = np.uint64(int(_mix(np.array([seed], dtype=np.uint64))[0]))
        self.sites = [
            (
                " | ".join(rng.sample(self.vocab[:2000], 6)).title() + f" | Site {s}",
                " ".join(rng.sample(self.vocab[:5000], 12)) + f". Copyright 2026 site{s}. All rights reserved.",
            )
            for s in range(SITES)
        ]

    # -- base documents (pure functions of the family) -------------------------------------------
    def _hashes(self, families: np.ndarray, salt: int, width: int) -> np.ndarray:
        base = _mix(families.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15) ^ self._key ^ np.uint64(salt))
        return _mix(base[:, None] + np.arange(width, dtype=np.uint64)[None, :])

    def bases(self, families: np.ndarray) -> list[tuple[str, str, int, int]]:
        """``(title, text, site, boilerplate bits)`` of each family's base (vectorized)."""
        if families.size == 0:
            return []
        b = families.size
        half = _MAX_TOKENS // 2  # two 22-bit draws from each 64-bit hash
        words = self._hashes(families, 1, half)
        draws = np.concatenate([words >> np.uint64(64 - _TABLE_BITS), words & np.uint64((1 << _TABLE_BITS) - 1)], 1)
        ranks = self._table[draws.astype(np.intp)]
        extra = self._hashes(families, 2, 40)
        targets = (self.size * 0.75 + (extra[:, 0] % np.uint64(self.size // 2 + 1)).astype(np.int64)).astype(np.int32)
        cuts = np.argmax(np.cumsum(self._word_len[ranks], axis=1) >= targets[:, None], axis=1) + 1
        width = int(cuts.max())
        # sentences of 6-18 words, a paragraph break after every fifth; the last word ends one
        ends = np.cumsum((extra[:, 8:] % np.uint64(13)).astype(np.int32) + 6, axis=1) - 1
        kind = np.zeros((b, width + 1), dtype=np.int32)  # 0: " ", 1: ". ", 2: ".\n\n"
        rows = np.broadcast_to(np.arange(b)[:, None], ends.shape)
        inside = ends < width
        marks = np.where(np.arange(ends.shape[1]) % 5 == 4, 2, 1)[None, :].repeat(b, 0)
        kind[rows[inside], ends[inside]] = marks[inside]
        kind[np.arange(b), cuts - 1] = 1
        kind[:, 1:] += 3 * (kind[:, :-1] > 0)  # + 3: first word of a sentence (capitalized)
        kind[:, 0] += 3
        forms = (kind[:, :width] * len(self.vocab) + ranks[:, :width]).tolist()
        titles = ranks[:, -6:].tolist()
        out = []
        vocab, pieces = self.vocab, self._pieces
        for i in range(b):
            body = "".join(itemgetter(*forms[i][: cuts[i]])(pieces)).rstrip() if cuts[i] > 1 else "Empty."
            bits = int(extra[i, 1] % np.uint64(10))  # 0-1: header, 2-4: footer, 5: both
            site = int(extra[i, 2] % np.uint64(SITES))
            boiler = (bits in (0, 1, 5)) * KINDS["header"] | (bits in (2, 3, 4, 5)) * KINDS["footer"]
            title = " ".join(vocab[r] for r in titles[i]).capitalize()
            out.append((title, body, site, boiler))
        return out

    def _with_boilerplate(self, body: str, site: int, boiler: int) -> str:
        header, footer = self.sites[site]
        if boiler & KINDS["header"]:
            body = f"{header}\n\n{body}"
        if boiler & KINDS["footer"]:
            body = f"{body}\n\n{footer}"
        return body

    def base_text(self, family: int) -> str:
        """The text of a family's base document."""
        _, body, site, boiler = self.bases(np.array([family]))[0]
        return self._with_boilerplate(body, site, boiler)

    # -- the stream ------------------------------------------------------------------------------
    def _variant(self, rng: random.Random, base: tuple[str, str, int, int]) -> tuple[str, str, int]:
        title, body, site, boiler = base
        kinds = rng.sample(list(KINDS), 2 if rng.random() < 0.3 else 1)
        bits = 0
        for kind in kinds:
            bits |= KINDS[kind]
            if kind in ("header", "footer"):
                boiler ^= KINDS[kind]
            elif kind == "edit":
                words = body.split(" ")
                for _ in range(rng.randint(1, 3)):
                    words[rng.randrange(len(words))] = self.vocab[rng.randrange(len(self.vocab))]
                body = " ".join(words)
            elif kind == "truncate":
                cut = body.rfind(" ", 0, int(len(body) * rng.uniform(0.93, 0.97)))
                body = body[:cut]
        text = self._with_boilerplate(body, site, boiler)
        if "fwd" in kinds:
            title = f"Fwd: {title}"
            text = f"Fwd: {title[5:]}\n\n{text}"
        if "timestamp" in kinds:
            text = f"Last updated {2020 + rng.randrange(7)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d} " + (
                f"{rng.randrange(24):02d}:{rng.randrange(60):02d} UTC\n{text}"
            )
        return title, text, bits

    def documents(self, n: int, batch: int = 2048) -> Iterator[Doc]:
        """The first ``n`` documents of the stream.

        Ids are 16 hex digits in random order, as hashed URLs are (9 random digits, then the
        position in the stream: :func:`doc_index`), so that the state's keys arrive unsorted.
        """
        rng = random.Random(f"stream-{self.seed}")
        families = 0
        for start in range(0, n, batch):
            plan: list[tuple[int, bool]] = []
            for _ in range(batch):  # always whole batches: the stream does not depend on n
                if families and rng.random() < self.dup_fraction:
                    plan.append((rng.randrange(families), True))
                else:
                    plan.append((families, False))
                    families += 1
            bases = self.bases(np.array([f for f, _ in plan], dtype=np.int64))
            prefixes = (_mix(np.arange(start, start + batch, dtype=np.uint64) ^ self._key) >> np.uint64(28)).tolist()
            for offset, ((family, variant), base) in enumerate(zip(plan, bases, strict=True)):
                i = start + offset
                if variant:
                    title, text, kinds = self._variant(rng, base)
                else:
                    title, text, kinds = base[0], self._with_boilerplate(base[1], base[2], base[3]), 0
                day = rng.randrange(365)
                doc = {
                    "id": f"{prefixes[offset]:09x}{i:07x}",
                    "url": f"https://site{base[2]}.example/page/{family}" + (f"?v={i}" if variant else ""),
                    "title": title,
                    "text": text,
                    "source": f"site{base[2]}",
                    "updated_at": f"2026-{1 + day // 31 % 12:02d}-{1 + day % 28:02d}T{rng.randrange(24):02d}:00:00Z",
                }
                if i >= n:
                    return
                yield Doc(orjson.dumps(doc), family, kinds)


def doc_index(doc_id: str) -> int:
    """The position of a generated document in the stream, from its id."""
    return int(doc_id[9:], 16)


def write_corpus(path: Path, n: int, seed: int = 1, dup_fraction: float = 0.3) -> dict[str, float]:
    """Write ``n`` documents to ``path`` (JSONL) and the ground truth to ``path.truth.npz``."""
    family = np.empty(n, dtype=np.int32)
    kinds = np.empty(n, dtype=np.uint8)
    started = time.perf_counter()
    size = 0
    with open(path, "wb", buffering=1 << 22) as out:
        for i, doc in enumerate(ScaleCorpus(seed, dup_fraction).documents(n)):
            out.write(doc.raw + b"\n")
            size += len(doc.raw) + 1
            family[i], kinds[i] = doc.family, doc.kinds
    np.savez(truth_path(path), family=family, kinds=kinds)
    return {"docs": n, "seconds": time.perf_counter() - started, "bytes": size}


def truth_path(path: Path) -> Path:
    """Where :func:`write_corpus` puts the ground truth of ``path``."""
    return path.with_name(path.name + ".truth.npz")


# -- scoring against the ground truth ---------------------------------------------------------------
def _pairs(counts: np.ndarray) -> int:
    return int((counts * (counts - 1) // 2).sum())


def quality(labels: np.ndarray, family: np.ndarray, kinds: np.ndarray) -> dict[str, Any]:
    """Pair recall/precision of clusters (``labels``) against the families, and recall per variant kind."""
    true_pairs = _pairs(np.unique(family, return_counts=True)[1])
    found_pairs = _pairs(np.unique(labels, return_counts=True)[1])
    joint = labels * (int(family.max()) + 1) + family
    correct = _pairs(np.unique(joint, return_counts=True)[1])
    _, first = np.unique(family, return_index=True)
    base_of = np.empty(int(family.max()) + 1, dtype=np.int64)
    base_of[family[first]] = first
    with_base = labels == labels[base_of[family]]
    by_kind = {}
    for name, bit in KINDS.items():
        mask = (kinds & bit) > 0
        by_kind[name] = round(float(with_base[mask].mean()), 4) if mask.any() else None
    return {
        "true_pairs": true_pairs,
        "clustered_pairs": found_pairs,
        "correct_pairs": correct,
        "recall": round(correct / true_pairs, 4) if true_pairs else None,
        "precision": round(correct / found_pairs, 4) if found_pairs else None,
        "variant_recall_by_kind": by_kind,
        "variants_with_base": round(float(with_base[kinds > 0].mean()), 4),
    }


def components(pairs: np.ndarray, n: int) -> np.ndarray:
    """Connected components of ``pairs`` over ``n`` documents, labelled by their smallest member."""
    return np.array(quality_components(n, pairs.tolist()), dtype=np.int64)


def jaccard_sample(path: Path, seed: int, sample: int = 2000) -> dict[str, Any]:
    """Exact word-3-gram Jaccard of sampled variants with their base (the engine's normalization)."""
    import orjson

    from stream_dedupe.config import ShingleSpec
    from stream_dedupe.core.normalize import Normalizer
    from stream_dedupe.core.shingle import shingles

    normalizer, spec = Normalizer(), ShingleSpec.parse("word:3")
    truth = np.load(truth_path(path))
    variants = np.flatnonzero(truth["kinds"] > 0)
    chosen = set(np.random.default_rng(seed).choice(variants, min(sample, variants.size), replace=False).tolist())
    corpus = ScaleCorpus(seed)
    values = []
    with open(path, "rb") as fh:
        for i, line in enumerate(fh):
            if i in chosen:
                a = set(shingles(normalizer.normalize(orjson.loads(line)["text"]), spec))
                b = set(shingles(normalizer.normalize(corpus.base_text(int(truth["family"][i]))), spec))
                values.append(len(a & b) / len(a | b))
    arr = np.array(values)
    return {
        "variants_sampled": int(arr.size),
        "min": round(float(arr.min()), 4),
        "p5": round(float(np.percentile(arr, 5)), 4),
        "mean": round(float(arr.mean()), 4),
        f"share_at_least_{MIN_JACCARD}": round(float((arr >= MIN_JACCARD).mean()), 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=10000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--dup-fraction", type=float, default=0.3)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    info = write_corpus(args.out, args.docs, args.seed, args.dup_fraction)
    print(orjson.dumps(info).decode())


if __name__ == "__main__":
    main()
