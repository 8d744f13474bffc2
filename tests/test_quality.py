from __future__ import annotations

import itertools
import random
from pathlib import Path

import numpy as np
import pytest

from stream_dedupe.quality.allpairs import similar_pairs
from stream_dedupe.quality.metrics import adjusted_rand_index, components, pair_scores


def brute_force_pairs(sets: list[set[int]], threshold: float) -> dict[tuple[int, int], float]:
    """Every pair at or above ``threshold``, by comparing all of them (the join's oracle)."""
    return {
        (i, j): len(sets[i] & sets[j]) / len(sets[i] | sets[j])
        for i, j in itertools.combinations(range(len(sets)), 2)
        if sets[i] | sets[j] and len(sets[i] & sets[j]) / len(sets[i] | sets[j]) >= threshold
    }


@pytest.mark.parametrize("threshold", [0.3, 0.5, 0.8, 0.95, 1.0])
def test_allpairs_equals_brute_force(threshold: float) -> None:
    rng = random.Random(int(threshold * 100))
    sets = []
    for _ in range(80):
        base = set(rng.sample(range(150), rng.randint(1, 30)))
        sets.append(base)
        copy = set(base)
        for _ in range(rng.randint(0, 4)):
            copy.add(rng.randrange(200))
        sets.append(copy)
    sets.append(set())
    arrays = [np.array(sorted(s), dtype=np.uint32) for s in sets]
    got = similar_pairs(arrays, threshold)
    want = brute_force_pairs(sets, threshold)
    assert got.keys() == want.keys()
    assert all(got[k] == pytest.approx(want[k]) for k in want)


@pytest.mark.parametrize("threshold", [0.5, 0.8])
def test_allpairs_equals_brute_force_on_copies_of_many_sizes(threshold: float) -> None:
    """Many exact copies (long runs of one prefix token), sizes from 1 to 120, tokens of any value."""
    rng = np.random.default_rng(int(threshold * 10))
    sets: list[set[int]] = []
    for _ in range(60):
        base = set(rng.choice(2**32 - 1, size=int(rng.integers(1, 120)), replace=False).tolist())
        for _ in range(int(rng.integers(1, 6))):  # copies, some edited
            copy = set(base)
            for token in list(copy)[: int(rng.integers(0, 3))]:
                copy.discard(token)
            copy.update(rng.choice(2**32 - 1, size=int(rng.integers(0, 3))).tolist())
            sets.append(copy)
    rng.shuffle(sets)  # type: ignore[arg-type]
    arrays = [np.array(sorted(s), dtype=np.uint32) for s in sets]
    got = similar_pairs(arrays, threshold)
    want = brute_force_pairs(sets, threshold)
    assert len(want) > 100  # the copies make pairs
    assert list(got) == sorted(want)
    assert all(got[k] == pytest.approx(want[k]) for k in want)


def test_allpairs_of_no_sets_and_of_empty_sets() -> None:
    empty = np.zeros(0, dtype=np.uint32)
    assert similar_pairs([], 0.8) == {}
    assert similar_pairs([empty, empty], 0.8) == {}
    assert similar_pairs([empty, np.array([1, 2], dtype=np.uint32), np.array([1, 2], dtype=np.uint32)], 1.0) == {
        (1, 2): 1.0
    }


def test_pair_scores() -> None:
    s = pair_scores({(0, 1), (1, 2), (3, 4)}, {(0, 1), (3, 4), (5, 6), (7, 8)})
    assert (s.precision, s.recall) == (0.5, 2 / 3)
    assert s.f1 == pytest.approx(2 * 0.5 * (2 / 3) / (0.5 + 2 / 3))


def test_adjusted_rand_index() -> None:
    assert adjusted_rand_index([0, 0, 1, 1], [5, 5, 7, 7]) == 1.0
    assert adjusted_rand_index([0, 0, 1, 1], [0, 1, 0, 1]) < 0
    assert adjusted_rand_index([0, 0, 0, 1, 2], [0, 0, 1, 1, 2]) == pytest.approx(0.4 / 1.9)  # (1 - 0.6) / (2.5 - 0.6)


def test_components() -> None:
    assert components(5, [(0, 1), (3, 4), (1, 0)]) == [0, 0, 2, 3, 3]


def test_eval_command_on_labelled_corpus() -> None:
    import subprocess
    import sys

    import orjson

    from .conftest import CLOUGH, shared_file

    out = subprocess.run(
        [sys.executable, "-m", "stream_dedupe", "eval", str(shared_file(CLOUGH)), "--threshold", "0.5", "--json"],
        capture_output=True,
        timeout=300,
        check=True,
    ).stdout
    report = orjson.loads(out)
    assert report["documents"] == 100
    by_name = {m["method"].split(",")[0]: m for m in report["methods"]}
    exact = by_name["stream-dedupe verify=exact"]
    # 13 pairs at Jaccard >= 0.5 in this corpus (shared/data/README.md); exact verification finds all
    assert exact["true_pairs"] == 13 and exact["recall"] == 1.0 and exact["precision"] == 1.0
    assert set(exact["recall_by_label"]) == {"cut", "light", "heavy", "non"}
    assert exact["recall_by_label"]["non"] == 0.0
    assert "datasketch MinHashLSH(threshold=0.5)" in by_name


def test_quality_targets_on_newsgroups() -> None:
    """Quality on 20 Newsgroups at threshold 0.8, against exact Jaccard (docs/quality.md).

    Targets: exact verification recall >= 0.98 and precision >= 0.99; MinHash-estimate
    verification recall >= 0.90 and precision >= 0.95 (with the default estimate margin 0.01).
    """
    import gzip

    from stream_dedupe.config import BoilerplateConfig, DedupeParams
    from stream_dedupe.quality.evaluate import evaluate

    from .conftest import NEWSGROUPS, shared_file

    with gzip.open(shared_file(NEWSGROUPS)) as fh:
        raws = fh.read().splitlines()
    # The truth is exact Jaccard on the full texts: score verification with learning off...
    report = evaluate(raws, DedupeParams(boilerplate=BoilerplateConfig(learn=False)), datasketch=False)
    methods = {m.name: m.scores for m in report.methods}
    exact, estimate = methods["stream-dedupe verify=exact"], methods["stream-dedupe verify=estimate"]
    assert exact.true_pairs == 170  # shared/data/README.md: 170 pairs >= 0.8
    assert exact.recall >= 0.98 and exact.precision >= 0.99
    assert estimate.recall >= 0.90 and estimate.precision >= 0.95
    # ...and the defaults (learned boilerplate on) still find the true pairs; the extra pairs they
    # report are posts whose bodies match once shared lines (signatures, headers) are stripped
    learned = {m.name: m.scores for m in evaluate(raws, DedupeParams(), datasketch=False).methods}
    assert learned["stream-dedupe verify=exact"].recall >= 0.98


def test_index_check_residual_and_loss_on_a_hand_built_result() -> None:
    from stream_dedupe.quality.dedup_result import DedupResult
    from stream_dedupe.quality.index_check import index_check

    ids = ["d0", "d1", "d2", "d3", "d4"]
    ranges = [(0, 100), (0, 95), (50, 150), (1000, 1100), (1000, 1090)]
    sets = [np.arange(a, b, dtype=np.uint32) for a, b in ranges]
    truth = similar_pairs(sets, 0.8)
    assert set(truth) == {(0, 1), (3, 4)}  # J(d0, d1) = 0.95, J(d3, d4) = 0.9, J(d0, d2) = 1/3
    chained = DedupResult.from_clusters([{"cluster": "c", "canonical": "d0", "members": ["d0", "d1", "d2"]}])
    check = index_check(ids, sets, truth, chained, 0.8)
    assert (check.kept, check.dropped) == (3, 2)
    assert (check.residual_pairs, check.residual_documents) == (1, 2)  # d3 and d4 both indexed
    assert check.lost == 1 and check.lost_examples == [{"id": "d2", "representative": "d0", "similarity": 0.333333}]
    assert check.lost_as_compared is None
    # the sets the run compared: d2 is covered there (its text without a learned line, say), d1 is not
    compared = {"d0": sets[0], "d1": sets[3], "d2": sets[0][:90]}
    assert index_check(ids, sets, truth, chained, 0.8, compared).lost_as_compared == 1
    # a pair's own threshold (per-source) decides: at 0.5 both are covered
    assert index_check(ids, sets, truth, chained, 0.8, compared, lambda a, b: 0.0).lost_as_compared == 0
    assert index_check(ids, sets, truth, chained, 0.8, {"d0": sets[0]}).lost_as_compared == 2  # no set: lost
    assert (check.largest_component, check.largest_cover) == (3, 3)
    covered = DedupResult.from_clusters(
        [
            {
                "cluster": "c",
                "canonical": "d0",
                "members": [{"id": "d0"}, {"id": "d1", "representative": "d0"}, {"id": "d2", "representative": None}],
            }
        ]
    )
    check = index_check(ids, sets, truth, covered, 0.8)
    assert (check.kept, check.lost, check.largest_component, check.largest_cover) == (4, 0, 3, 2)


def test_eval_reports_index_checks(tmp_path: Path) -> None:
    import subprocess
    import sys

    import orjson

    from .helpers import corpus

    path = tmp_path / "c.jsonl"
    path.write_bytes(b"".join(orjson.dumps({"id": i, "text": t}) + b"\n" for i, t in corpus()))
    out = subprocess.run(
        [sys.executable, "-m", "stream_dedupe", "eval", str(path), "--json", "--no-datasketch"],
        capture_output=True,
        timeout=300,
        check=True,
    ).stdout
    methods = {m["method"]: m for m in orjson.loads(out)["methods"]}
    exact = methods["stream-dedupe verify=exact"]["index"]
    # 30 families of 3 near-copies and 30 singles: one page per family stays, nothing is lost
    assert (exact["kept"], exact["dropped"], exact["lost"], exact["residual_duplicate_pairs"]) == (60, 60, 0, 0)
    assert exact["largest_component"] == 3
    assert methods["stream-dedupe verify=estimate"]["index"]["kept"] >= 60
    table = subprocess.run(
        [sys.executable, "-m", "stream_dedupe", "eval", str(path), "--no-datasketch"],
        capture_output=True,
        timeout=300,
        check=True,
    ).stdout
    assert b"what the index keeps" in table and b"residual" in table


def test_eval_says_when_learned_boilerplate_puts_a_dropped_page_under_the_threshold(tmp_path: Path) -> None:
    """Two copies of one body that end in different learned footers: the engine drops one of them
    (it compares the bodies), while on the full texts the pair is far under the threshold. The
    report must not claim that loss is impossible then, and must count it."""
    import subprocess
    import sys

    import orjson

    rng = random.Random(5)

    def words(n: int) -> str:
        return " ".join(f"w{rng.randrange(3000)}" for _ in range(n))

    footers = [
        "\n".join(f"footer {name} line {i} with several words here {words(3)}" for i in range(6)) for name in "ab"
    ]
    docs = [
        {"id": f"{name}{i}", "source": "s", "text": words(80) + "\n" + footers[k]}
        for i in range(4)
        for k, name in enumerate("ab")
    ]
    body = words(120).split()
    docs.append({"id": "x", "source": "s", "text": " ".join(body) + "\n" + footers[0]})
    docs.append({"id": "y", "source": "s", "text": " ".join(["changed", *body[1:]]) + " extra words\n" + footers[1]})
    path = tmp_path / "c.jsonl"
    path.write_bytes(b"".join(orjson.dumps(d) + b"\n" for d in docs))

    def run(*flags: str) -> tuple[dict[str, object], dict[str, object], str]:
        command = [sys.executable, "-m", "stream_dedupe", "eval", str(path), "--no-datasketch", *flags]
        report = orjson.loads(subprocess.run([*command, "--json"], capture_output=True, timeout=300, check=True).stdout)
        table = subprocess.run(command, capture_output=True, timeout=300, check=True, text=True).stdout
        exact = next(m for m in report["methods"] if m["method"] == "stream-dedupe verify=exact")
        return report, exact["index"], " ".join(table.split())

    report, index, table = run("--boilerplate-min-docs", "3")
    assert report["learned_boilerplate"] is True
    assert (index["dropped"], index["lost"]) == (1, 1)
    assert index["lost_as_compared"] == 0  # on the texts it compared, the engine covers what it dropped
    assert "the engine compares the texts without their learned lines" in table
    assert "on the full texts (must be 0" not in table
    report, index, table = run("--no-learn-boilerplate")
    assert report["learned_boilerplate"] is False
    assert (index["dropped"], index["lost"], index["lost_as_compared"]) == (0, 0, 0)
    assert "on the full texts (must be 0 with --verify exact)" in table
    estimate = next(m for m in report["methods"] if m["method"] == "stream-dedupe verify=estimate")
    assert estimate["index"]["lost_as_compared"] is None  # no shingle sets kept: not measured
