"""Pair and cluster agreement measures (no scikit-learn needed)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from math import comb


@dataclass(frozen=True)
class PairScores:
    """Precision, recall and F1 of predicted pairs against true pairs."""

    true_pairs: int
    predicted_pairs: int
    correct: int

    @property
    def precision(self) -> float:
        """Correct / predicted (1.0 when nothing is predicted)."""
        return self.correct / self.predicted_pairs if self.predicted_pairs else 1.0

    @property
    def recall(self) -> float:
        """Correct / true (1.0 when there is nothing to find)."""
        return self.correct / self.true_pairs if self.true_pairs else 1.0

    @property
    def f1(self) -> float:
        """Harmonic mean of precision and recall."""
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0


def pair_scores(truth: set[tuple[int, int]], predicted: set[tuple[int, int]]) -> PairScores:
    """Score predicted pairs (``i < j``) against the true ones."""
    return PairScores(len(truth), len(predicted), len(truth & predicted))


def adjusted_rand_index(labels_a: list[int], labels_b: list[int]) -> float:
    """Adjusted Rand index of two partitions of the same items (1.0 = identical)."""
    if len(labels_a) != len(labels_b):
        raise ValueError("the two labelings must cover the same items")
    n = len(labels_a)
    pairs = Counter(zip(labels_a, labels_b, strict=True))
    sum_comb = sum(comb(c, 2) for c in pairs.values())
    sum_a = sum(comb(c, 2) for c in Counter(labels_a).values())
    sum_b = sum(comb(c, 2) for c in Counter(labels_b).values())
    total = comb(n, 2)
    if total == 0:
        return 1.0
    expected = sum_a * sum_b / total
    maximum = (sum_a + sum_b) / 2
    if maximum == expected:
        return 1.0
    return (sum_comb - expected) / (maximum - expected)


def components(n: int, pairs: Iterable[tuple[int, int]]) -> list[int]:
    """Connected-component label of each of ``n`` items linked by ``pairs``."""
    parent = list(range(n))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in pairs:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    return [find(i) for i in range(n)]
