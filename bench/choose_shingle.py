"""Measure shingle kinds and sizes on real and synthetic corpora (how the default was chosen).

For each shingling it reports:

* Clough & Stevenson (real, labelled): the mean exact Jaccard of answers with their source text
  per label, and the ROC AUC separating copied answers (``cut``, ``light``) from independent
  ones (``non``) by Jaccard with the source: how well the similarity ranks real copying.
* Synthetic crawl (``bench/synth.py``, 30% near-duplicates in crawler clothes): recall of the
  true family pairs at Jaccard >= 0.8, and the highest Jaccard among 20,000 random pairs of
  different families (how close unrelated documents of one template get).
* 20 Newsgroups (real): the mean Jaccard of the 100 reposted pairs with an identical body (what a
  repost with different headers scores) and of 20,000 random pairs.

    python bench/choose_shingle.py
"""

from __future__ import annotations

import gzip
import itertools
import random
import sys
from collections import defaultdict
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from synth import generate

from stream_dedupe.config import ShingleSpec
from stream_dedupe.core.normalize import Normalizer
from stream_dedupe.core.shingle import shingle_hash, shingles

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
SPECS = [ShingleSpec("word", k) for k in (1, 2, 3, 4, 5, 7)] + [ShingleSpec("char", k) for k in (5, 9)]


def shingle_sets(texts: list[str], spec: ShingleSpec) -> list[frozenset[int]]:
    normalizer = Normalizer()
    return [frozenset(shingle_hash(s) for s in shingles(normalizer.normalize(t), spec)) for t in texts]


def jaccard(a: frozenset[int], b: frozenset[int]) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


def auc(pos: list[float], neg: list[float]) -> float:
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def main() -> None:
    clough = [orjson.loads(line) for line in (DATA / "clough_stevenson_plagiarism.jsonl").read_bytes().splitlines()]
    synth = list(generate(3000, seed=5))
    with gzip.open(DATA / "20newsgroups_bydate.jsonl.gz") as fh:
        news = [orjson.loads(line) for line in fh]
    bodies: dict[str, list[int]] = defaultdict(list)
    for i, d in enumerate(news):
        if d["body_dup_group_size"] == 2:
            bodies[d["text"].split("\n\n", 1)[-1]].append(i)
    repost_pairs = [tuple(v) for v in bodies.values() if len(v) == 2]
    rng = random.Random(1)
    family = [d["family"] for d in synth]
    true_pairs = [(i, j) for i, j in itertools.combinations(range(len(synth)), 2) if family[i] == family[j]]
    random_synth = [
        (i, j)
        for i, j in ((rng.randrange(len(synth)), rng.randrange(len(synth))) for _ in range(40000))
        if family[i] != family[j]
    ][:20000]
    random_news = [(rng.randrange(len(news)), rng.randrange(len(news))) for _ in range(20000)]
    print(
        "| shingle | Clough J with source: cut/light/heavy/non | AUC copy vs non | synth recall@0.8 "
        "| synth max J unrelated | 20NG repost mean J | 20NG random mean J |"
    )
    print("|---|---|---|---|---|---|---|")
    for spec in SPECS:
        sets = shingle_sets([d["text"] for d in clough], spec)
        source = {d["cluster"]: sets[i] for i, d in enumerate(clough) if d["is_source"]}
        by_label: dict[str, list[float]] = defaultdict(list)
        for i, d in enumerate(clough):
            if not d["is_source"]:
                by_label[d["label"]].append(jaccard(sets[i], source[d["cluster"]]))
        means = "/".join(f"{sum(v) / len(v):.2f}" for v in (by_label[x] for x in ("cut", "light", "heavy", "non")))
        separation = auc(by_label["cut"] + by_label["light"], by_label["non"])
        ssets = shingle_sets([str(d["text"]) for d in synth], spec)
        recall = sum(jaccard(ssets[i], ssets[j]) >= 0.8 for i, j in true_pairs) / len(true_pairs)
        unrelated = max(jaccard(ssets[i], ssets[j]) for i, j in random_synth)
        needed = sorted({i for p in repost_pairs + random_news for i in p})
        nsets = dict(zip(needed, shingle_sets([news[i]["text"] for i in needed], spec), strict=True))
        repost = sum(jaccard(nsets[i], nsets[j]) for i, j in repost_pairs) / len(repost_pairs)
        noise = sum(jaccard(nsets[i], nsets[j]) for i, j in random_news) / len(random_news)
        print(f"| {spec} | {means} | {separation:.3f} | {recall:.3f} | {unrelated:.3f} | {repost:.3f} | {noise:.4f} |")


if __name__ == "__main__":
    main()
