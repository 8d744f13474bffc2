"""retrieval-eval: BM25 before and after dedup, on small corpora whose answers are known."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from stream_dedupe.config import DedupeParams
from stream_dedupe.quality.dedup_result import DedupResult
from stream_dedupe.quality.exact import jaccard, shingle_sets
from stream_dedupe.quality.queries import known_item_queries, load_query_file, load_trec
from stream_dedupe.quality.retrieval import retrieval_eval

from .helpers import edit, text


def _corpus() -> list[dict[str, Any]]:
    """Two entities with two copies each, a template-sharing pair of distinct commands, fillers."""
    rng = random.Random(12)
    template = text(rng, 100)
    docs: list[dict[str, Any]] = []
    for name in ("a", "b"):
        description = text(rng, 12)
        base = f"{description} {text(rng, 110)}"
        docs.append({"id": f"{name}1", "text": base, "entity": name, "query": description})
        docs.append({"id": f"{name}2", "text": edit(rng, base, 1), "entity": name, "query": description})
    for name in ("t1", "t2"):  # distinct commands: own description and options, one big shared template
        description = text(rng, 12)
        docs.append(
            {"id": name, "text": f"{description} {text(rng, 40)} {template}", "entity": name, "query": description}
        )
    for i in range(20):
        description = text(rng, 12)
        docs.append(
            {"id": f"f{i:02d}", "text": f"{description} {text(rng, 110)}", "entity": f"f{i}", "query": description}
        )
    return docs


#: A bad dedup: the copies are merged (right), and so is the template-sharing pair (wrong).
BAD_CLUSTERS = [
    {"cluster": "a1", "canonical": "a1", "size": 2, "members": ["a1", "a2"]},
    {"cluster": "b1", "canonical": "b1", "size": 2, "members": ["b1", "b2"]},
    {"cluster": "t1", "canonical": "t1", "size": 2, "members": ["t1", "t2"]},
]


def _write(path: Path, rows: list[dict[str, Any]]) -> str:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return str(path)


def _cli(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "stream_dedupe", "retrieval-eval", *args], capture_output=True, timeout=300
    )


def test_bad_merge_is_a_lost_query_with_its_representative() -> None:
    docs = _corpus()
    params = DedupeParams()
    sets, _ = shingle_sets([d["text"] for d in docs], params)
    by_id = {d["id"]: i for i, d in enumerate(docs)}
    similarity = jaccard(sets[by_id["t2"]], sets[by_id["t1"]])
    assert similarity < 0.8  # the pair shares a template but is not a near-duplicate
    assert jaccard(sets[by_id["a1"]], sets[by_id["a2"]]) >= 0.8

    queries = known_item_queries(docs, label_field="entity")
    report = retrieval_eval(docs, queries, DedupResult.from_clusters(BAD_CLUSTERS), params, k=5, label_field="entity")

    assert (report.documents, report.indexed, report.dropped) == (26, 23, 3)
    assert [q.query_id for q in report.lost] == ["t2"]
    (lost,) = report.lost
    assert len(lost.dropped) == 1
    assert lost.dropped[0].id == "t2" and lost.dropped[0].representative == "t1"
    assert lost.dropped[0].similarity == pytest.approx(similarity)
    assert report.gained == []
    assert report.dropped_across_labels == 1  # t2 replaced by t1, another entity
    # the copies of a and b fill two top-5 slots of their queries before dedup, one after
    assert report.before.redundancy > 0 and report.after.redundancy == 0
    assert report.before.success == 1.0 and report.after.success == pytest.approx(23 / 24)  # 24 entities, t2 lost
    assert report.ideal is not None and report.ideal.success == 1.0 and report.ideal.redundancy == 0


def test_known_item_queries_are_answered_by_a_verified_representative() -> None:
    docs = _corpus()
    queries = known_item_queries(docs)  # no label: one query per document, the document is the answer
    assert len(queries) == 26 and all(q.relevant == (q.query_id,) for q in queries)
    verified = retrieval_eval(docs, queries, DedupResult.from_clusters(BAD_CLUSTERS), DedupeParams(), k=5)
    # a2's and b2's queries are answered by a1 and b1 (J >= 0.8); t2's is not answered by t1
    assert [q.query_id for q in verified.lost] == ["t2"]
    assert verified.redundancy_by == "exact Jaccard" and verified.before.redundancy > verified.after.redundancy
    anyone = retrieval_eval(docs, queries, DedupResult.from_clusters(BAD_CLUSTERS), DedupeParams(), alias="any")
    # with any representative accepted, t2's query is lost only because t1 does not rank for it
    assert [q.query_id for q in anyone.lost] == ["t2"] and not anyone.lost[0].dropped[0].representative_retrieved


def test_representative_field_wins_over_canonical() -> None:
    docs = _corpus()
    covered = [
        {"cluster": "t1", "canonical": "t1", "size": 2, "members": [{"id": "t1"}, {"id": "t2", "representative": None}]}
    ]
    result = DedupResult.from_clusters(covered)
    assert result.indexed("t2") and result.cluster_of("t2") == "t1"
    report = retrieval_eval(docs, known_item_queries(docs, label_field="entity"), result, DedupeParams())
    assert report.lost == [] and report.indexed == 26
    reps = DedupResult.from_clusters([{**BAD_CLUSTERS[0], "representatives": {"a2": "a1"}}])
    assert reps.representative == {"a2": "a1"}


def test_cli_json_with_engine_run(tmp_path: Path) -> None:
    """The engine run inside retrieval-eval: copies are removed, no query is lost, redundancy drops."""
    rng = random.Random(5)
    rows = []
    for f in range(15):
        description = text(rng, 10)
        base = f"{description} {text(rng, 110)}"
        for c in range(3):
            rows.append({"id": f"f{f:02d}-{c}", "text": edit(rng, base, c), "family": f"f{f}", "query": description})
    corpus = _write(tmp_path / "c.jsonl", rows)
    out = _cli(corpus, "--label-field", "family", "--verify", "exact", "--json")
    assert out.returncode == 0, out.stderr.decode()
    report = orjson.loads(out.stdout)
    assert report["documents"] == 45 and report["indexed"] == 15 and report["queries"] == 15
    assert report["queries_lost"] == 0 and report["dropped_across_labels"] == 0
    assert report["before"]["redundancy"] > 0.3 and report["after"]["redundancy"] == 0.0
    assert report["after"]["success"] == 1.0


def test_cli_reads_clusters_and_reports_the_lost_query(tmp_path: Path) -> None:
    corpus = _write(tmp_path / "c.jsonl", _corpus())
    clusters = _write(tmp_path / "clusters.jsonl", BAD_CLUSTERS)
    out = _cli(corpus, "--clusters", clusters, "--label-field", "entity", "--json")
    assert out.returncode == 0, out.stderr.decode()
    report = orjson.loads(out.stdout)
    assert report["queries_lost"] == 1
    assert report["lost"][0]["dropped"][0]["id"] == "t2"
    assert report["lost"][0]["dropped"][0]["representative"] == "t1"
    table = _cli(corpus, "--clusters", clusters, "--label-field", "entity")
    assert table.returncode == 0 and b"queries lost: 1" in table.stdout and b"t2" in table.stdout


def _dedupe(corpus: str, *args: str) -> None:
    """Run ``stream-dedupe dedupe CORPUS ARGS...`` in a fresh process."""
    subprocess.run(
        [sys.executable, "-m", "stream_dedupe", "dedupe", corpus, *args], check=True, capture_output=True, timeout=300
    )


def test_events_and_state_give_the_same_result(tmp_path: Path) -> None:
    rows = [{k: v for k, v in d.items() if k != "entity"} for d in _corpus()]
    corpus = _write(tmp_path / "c.jsonl", rows)
    state, events = tmp_path / "state", tmp_path / "events.jsonl"
    _dedupe(corpus, "--state", str(state), "--events", str(events), "--no-progress")
    from stream_dedupe.storage.rocks import RocksStore

    store = RocksStore(state)
    try:
        from_state = DedupResult.from_store(store)
    finally:
        store.close()
    from_events = DedupResult.from_events_file(str(events))
    assert from_state.representative == from_events.representative
    assert {"a2", "b2"} <= from_state.representative.keys()
    via_state = orjson.loads(_cli(corpus, "--state", str(state), "--json").stdout)
    via_events = orjson.loads(_cli(corpus, "--events", str(events), "--json").stdout)
    assert via_state["indexed"] == via_events["indexed"] == 26 - len(from_state.representative)


def test_missing_tools_say_what_to_install(tmp_path: Path) -> None:
    corpus = _write(tmp_path / "c.jsonl", _corpus())
    code = (
        "import sys; sys.modules['bm25s'] = None; sys.argv = ['stream-dedupe', 'retrieval-eval', sys.argv[1]]; "
        "from stream_dedupe.cli import main; main()"
    )
    out = subprocess.run([sys.executable, "-c", code, corpus], capture_output=True, timeout=120)
    assert out.returncode == 2
    assert b"needs bm25s" in out.stderr and b"pip install 'stream-dedupe[tools]'" in out.stderr


def test_query_files(tmp_path: Path) -> None:
    jsonl = _write(tmp_path / "q.jsonl", [{"query_id": "1", "query": "w1 w2", "relevant": ["a1", "a2"]}])
    assert [(q.query_id, q.relevant) for q in load_query_file(jsonl)] == [("1", ("a1", "a2"))]
    topics, qrels = tmp_path / "topics.txt", tmp_path / "qrels.txt"
    topics.write_text("<top>\n<num> Number: 301\n<title> Topic: foreign minorities\n<desc> x\n</top>\n")
    qrels.write_text("301 0 d1 1\n301 0 d2 0\n301 0 d3 2\n")
    (q,) = load_trec(str(topics), str(qrels))
    assert (q.query_id, q.text, q.relevant) == ("301", "foreign minorities", ("d1", "d3"))
    topics.write_text("7\tcats and dogs\n")
    qrels.write_text("7 0 d9 1\n")
    assert load_trec(str(topics), str(qrels))[0].text == "cats and dogs"
    bad = _write(tmp_path / "bad.jsonl", [{"query": "no id"}])
    out = _cli(_write(tmp_path / "c.jsonl", _corpus()), "--queries", bad)
    assert out.returncode == 2 and b"query_id" in out.stderr


def test_events_replay_follows_merges_canonical_changes_and_splits(tmp_path: Path) -> None:
    rng = random.Random(3)
    seq = text(rng, 300).split()
    rows = [
        {"id": "x", "text": " ".join(seq[0:200])},
        {"id": "z", "text": " ".join(seq[40:240])},
        {"id": "y", "text": " ".join(seq[20:220])},  # links x and z: their clusters merge
        {"id": "w", "text": " ".join(seq[20:220] + seq[240:250])},  # longer: the new canonical
        {"id": "u", "text": text(rng, 150)},
    ]
    corpus = _write(tmp_path / "c.jsonl", rows)
    deletions = tmp_path / "del.txt"
    deletions.write_text("y\nw\n")  # the bridge leaves: the cluster splits
    state, events = tmp_path / "state", tmp_path / "events.jsonl"
    _dedupe(corpus, "--state", str(state), "--events", str(events), "--batch-size", "1", "--no-progress")
    kinds = {orjson.loads(line)["event"] for line in events.read_bytes().splitlines()}
    assert {"clusters-merged", "canonical-changed"} <= kinds
    from stream_dedupe.storage.rocks import RocksStore

    def both() -> tuple[DedupResult, DedupResult]:
        store = RocksStore(state)
        try:
            return DedupResult.from_store(store), DedupResult.from_events_file(str(events))
        finally:
            store.close()

    from_state, from_events = both()
    # y is covered by w (a superset of it); x and z are not near-duplicates of w: both stay indexed
    assert from_state.representative == from_events.representative and len(from_state.representative) == 1
    _dedupe(corpus, "--state", str(state), "--events", str(events), "--deletions", str(deletions), "--no-progress")
    assert b'"cluster-split"' in events.read_bytes()
    from_state, from_events = both()
    assert from_state.representative == from_events.representative


def test_quality_matrix_maps_verify_to_the_eval_method() -> None:
    from bench.quality_matrix import _eval_options

    assert _eval_options(["--verify", "exact", "--learn-boilerplate"]) == (["--learn-boilerplate"], "exact")
    assert _eval_options(["--verify=estimate", "--estimate-margin", "0.02", "--threshold", "0.7"]) == (
        ["--threshold", "0.7"],
        "estimate",
    )
    assert _eval_options(["--no-title-guard"]) == (["--no-title-guard"], "exact")  # the engine's default


def test_a_subset_searched_in_a_corpus_tokenized_once_ranks_and_scores_as_the_subset_alone() -> None:
    """The corpus' vocabulary holds words no document of the subset has (and queries ask for them)."""
    from stream_dedupe.quality.retrieval import Bm25Corpus, bm25_search

    rng = random.Random(3)
    texts = [text(rng, 60) for _ in range(120)]
    queries = [" ".join(rng.sample(t.split(), 6)) for t in rng.sample(texts, 30)]
    queries.append("zzz-unknown words only")
    subset = sorted(rng.sample(range(len(texts)), 70))
    corpus = Bm25Corpus(texts)
    assert corpus.search(queries, 10) == bm25_search(texts, queries, 10)
    alone = bm25_search([texts[i] for i in subset], queries, 10)
    shared = corpus.search(queries, 10, subset)
    assert shared == alone  # the same positions and scores, to the bit
    assert sum(len(hits) for hits in shared) > 200 and shared[-1] == []
    assert Bm25Corpus([]).search(queries, 10) == [[] for _ in queries]
    assert corpus.search(queries, 10, []) == [[] for _ in queries]


def test_a_label_field_no_document_has_is_named_as_such() -> None:
    from stream_dedupe.errors import ConfigError

    docs = [{"id": "a", "text": "one page about apples"}, {"id": "b", "text": "another about pears"}]
    with pytest.raises(ConfigError, match="no document has the label field 'entity'"):
        known_item_queries(docs, label_field="entity")
    assert len(known_item_queries(docs)) == 2
