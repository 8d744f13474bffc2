"""The Python API (stream_dedupe.api): real engine, real RocksDB, datasketch as the oracle."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from datasketch import MinHash, MinHashLSH

from stream_dedupe import Decision, Deduper, StateError, StateMismatchError
from stream_dedupe.core.normalize import Normalizer
from stream_dedupe.core.shingle import shingle_hash, shingles
from stream_dedupe.errors import ConfigError
from stream_dedupe.storage.base import NAMESPACES
from tests.helpers import edit, text

FOOTER = "posted via the example mailing list archive service"


def near_corpus(seed: int, n: int = 200) -> list[dict[str, Any]]:
    """~200 documents: families of near-duplicates (1 to 14 word edits: around the threshold),
    exact copies, retitled copies, two sources, a recurring footer (learned as boilerplate),
    short texts (exact match only), empty texts, dates."""
    rng = random.Random(seed)
    bases: list[str] = []
    docs: list[dict[str, Any]] = []
    while len(docs) < n:
        i = len(docs)
        roll = rng.random()
        if not bases or roll < 0.25:
            body = text(rng, rng.choice([40, 80, 120]))
            bases.append(body)
        elif roll < 0.75:
            body = edit(rng, rng.choice(bases), rng.randint(1, 14))
        elif roll < 0.85:
            body = rng.choice(bases)  # an exact copy
        elif roll < 0.9:
            body = " ".join(rng.choice(["a", "b", "c"]) for _ in range(4))  # below min_tokens
        elif roll < 0.92:
            body = " ... "
        else:
            body = edit(rng, rng.choice(bases), rng.randint(0, 3))
        doc_id = f"d{rng.randrange(i):03d}" if i and rng.random() < 0.15 else f"d{i:03d}"  # re-crawls
        doc: dict[str, Any] = {"id": doc_id, "text": body, "source": rng.choice(["news", "wiki"])}
        if rng.random() < 0.5 and body.strip(" ."):
            doc["text"] = f"{body}\n{FOOTER}"
        if rng.random() < 0.3:
            doc["title"] = rng.choice(["Release notes", "Re: Release notes", "Changelog"])
        if rng.random() < 0.3:
            doc["updated_at"] = f"2026-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}T00:00:00Z"
        docs.append(doc)
    return docs


def comparable(decision: Decision) -> Decision:
    return dataclasses.replace(decision, seq=None)


CONFIGS: list[dict[str, Any]] = [
    {"boilerplate_min_docs": 5},
    {"verify": "estimate", "title_guard": False, "learn_boilerplate": False},
    {"source_thresholds": {"wiki": 0.9}, "boilerplate_min_docs": 8, "threshold": 0.75},
]


@pytest.mark.parametrize("params", CONFIGS)
@pytest.mark.parametrize("seed", [1, 2])
def test_query_answers_what_add_then_decides(params: dict[str, Any], seed: int) -> None:
    docs = near_corpus(seed)
    kinds: list[str] = []
    rng = random.Random(seed)
    with Deduper.memory(**params) as dd:
        for doc in docs:
            fields = {k: doc.get(k) for k in ("title", "source", "updated_at")}
            answer = dd.query(doc["text"], doc_id=doc["id"], **fields)
            decision = dd.add(doc)
            assert comparable(answer.decision) == comparable(decision), doc["id"]
            kinds.append(decision.kind)
            if decision.duplicate:
                # the representative it names is among the matches, with the same similarity
                assert (decision.representative, decision.similarity) in [(m.id, m.similarity) for m in answer.matches]
            # asked again (same id, same content): unchanged, exactly as the re-crawl then decides
            if decision.kind in ("new", "duplicate-of") and rng.random() < 0.2:
                again = dd.query(doc["text"], doc_id=doc["id"], **fields)
                assert again.decision.kind == "unchanged"
                assert comparable(again.decision) == comparable(dd.add(doc))
        if dd.engine.boilerplate is not None:
            assert dd.engine.boilerplate.learned and dd.engine.counters["resigned"]  # retroactive learning ran
        assert dd.engine.counters["rejected_candidates"]  # candidates below the threshold were met too
    assert kinds.count("duplicate-of") >= 15 and kinds.count("new") >= 40 and "invalid" in kinds


def snapshot(dd: Deduper) -> dict[str, list[tuple[bytes, bytes]]]:
    return {ns: list(dd.store.items(ns)) for ns in NAMESPACES}


def test_query_does_not_change_the_state(tmp_path: Path) -> None:
    docs = near_corpus(3)
    with Deduper.open(tmp_path / "state", boilerplate_min_docs=5, batch_size=64) as dd:
        dd.add_many(docs[:150])
        before = snapshot(dd)
        seq, lsh_size, learned = dd.seq, len(dd.engine.lsh), set(dd.engine.boilerplate.learned)  # type: ignore[union-attr]
        stripped = dd.engine.boilerplate.stripped_lines  # type: ignore[union-attr]
        assert learned and before["boilerplate"]  # the footer was learned: the strip path is exercised
        answers = dd.query_many(docs[150:])
        answers += dd.query_many([(d["id"], d["text"]) for d in docs[:20]])
        answers += [dd.query(d["text"], source=d["source"]) for d in docs[150:]]
        found = dd.query_minhash(dd.minhash(docs[0]["text"]))
        assert any(a.duplicate for a in answers) and found
        assert any(a.decision.updated for a in answers)  # re-crawls were asked too (the shadow engine)
        assert snapshot(dd) == before
        assert (dd.seq, len(dd.engine.lsh), dd.engine.boilerplate.learned) == (seq, lsh_size, learned)  # type: ignore[union-attr]
        assert dd.engine.boilerplate.stripped_lines == stripped  # type: ignore[union-attr]
        # and the next add decides exactly what the query said
        first = docs[150]
        assert comparable(
            dd.query(
                first["text"],
                first.get("title"),
                first["source"],
                doc_id=first["id"],
                updated_at=first.get("updated_at"),
            ).decision
        ) == comparable(dd.add(first))


def test_open_close_reopen_keeps_state_params_and_seq(tmp_path: Path) -> None:
    state = tmp_path / "state"
    docs = list({d["id"]: d for d in near_corpus(4, 60)}.values())  # one version per id
    with Deduper.open(state, threshold=0.7, num_perm=64) as dd:
        first = dd.add_many(docs)
        params, seq = dd.params, dd.seq
    with pytest.raises(StateError, match="closed"):
        dd.add(("x", "some text"))
    with Deduper.open(state) as dd:  # no parameters: the state's are used
        assert dd.params == params and dd.seq == seq
        again = dd.add_many(docs[:10])
        assert [d.kind for d in again] == [
            "unchanged" if d.kind in ("new", "duplicate-of") else d.kind for d in first[:10]
        ]
        assert again[0].seq == seq + 1
        assert dd.document(docs[0]["id"]) == docs[0]


def test_mismatched_parameters_are_refused_and_release_the_state(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with Deduper.open(state, threshold=0.8) as dd:
        dd.add(("a", "one two three four five six seven eight nine ten eleven"))
    with pytest.raises(StateMismatchError, match=r"threshold: state has 0.8, this run asks for 0.9 \(--threshold"):
        Deduper.open(state, threshold=0.9)
    with Deduper.open(state, threshold=0.8) as dd:  # the failed open released the RocksDB lock
        assert dd.seq == 1
        with pytest.raises(StateError, match="already open in this process: close the other handle"):
            Deduper.open(state)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "file.txt").write_text("x")
    with pytest.raises(ConfigError, match="not a stream-dedupe state directory"):
        Deduper.open(tmp_path / "other")
    with pytest.raises(ConfigError, match="unknown parameter"):
        Deduper.memory(treshold=0.8)
    assert not (tmp_path / "new").exists()
    with pytest.raises(ConfigError, match="threshold must be in"):
        Deduper.open(tmp_path / "new", threshold=1.5)
    assert not (tmp_path / "new").exists()  # checked before the directory is created


def generate(docs: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    yield from docs


def test_inputs_dicts_tuples_generators_and_invalid_records() -> None:
    rng = random.Random(5)
    base = text(rng)
    with Deduper.memory(batch_size=2) as dd:
        decisions = dd.add_many(generate([{"id": "a", "text": base}, {"id": "b", "text": edit(rng, base, 1)}]))
        decisions += dd.add_many(iter([("c", base), ("d", "")]))
        decisions.append(dd.add({"id": "e", "text": 5}))
        decisions.append(dd.add({"id": "f", "text": base, "updated_at": "yesterday"}))
        kinds = [(d.id, d.kind, d.reason) for d in decisions]
        assert kinds == [
            ("a", "new", None),
            ("b", "duplicate-of", None),
            ("c", "duplicate-of", None),
            ("d", "invalid", "empty-text"),
            ("e", "invalid", "bad-text"),
            ("f", "invalid", "bad-updated-at"),
        ]
        assert decisions[2].exact and decisions[2].representative == "a" and decisions[2].similarity == 1.0
        assert [d.seq for d in decisions] == sorted(d.seq for d in decisions)
        with pytest.raises(TypeError, match="an \\(id, text\\) tuple"):
            dd.add(["g", base])


def test_dataframe_rows() -> None:
    import pandas as pd  # a dev dependency (the package itself never imports pandas)

    rng = random.Random(6)
    base = text(rng)
    frame = pd.DataFrame(
        {"id": ["a", "b", "c"], "text": [base, edit(rng, base, 1), text(rng)], "title": [None, None, "T"]}
    )
    with Deduper.memory() as dd:
        decisions = dd.add_many(frame)
        assert [d.kind for d in decisions] == ["new", "duplicate-of", "new"]
        assert dd.add(frame.iloc[0]).kind == "unchanged"


def test_remove_clusters_canonical_documents_and_explain() -> None:
    rng = random.Random(8)
    base = text(rng)
    longer = base + " " + text(rng, 4)
    events: list[list[dict[str, Any]]] = []
    with Deduper.memory(on_events=events.append) as dd:
        with pytest.raises(TypeError, match="a document id is a string, got int 5"):
            dd.remove(5)  # type: ignore[arg-type]
        dd.add_many([("a", base), ("b", longer), ("s", text(rng))])
        [cluster] = dd.clusters()
        assert (cluster.label, cluster.canonical, cluster.members, cluster.representatives) == (
            "a",
            "b",
            ("a", "b"),
            ("b",),
        )
        assert cluster.covered_by == {"a": "b"}
        assert sorted(d["id"] for d in dd.canonical_documents()) == ["b", "s"]
        report = dd.explain("a", "b")
        assert report.duplicate and report.exact == pytest.approx(
            dict((m.id, m.similarity) for m in dd.query(base).matches)["b"], abs=1e-6
        )
        removed = dd.remove("b")
        assert removed.kind == "deleted"
        assert any(e["event"] == "cover-changed" and e["entered"] == ["a"] for e in removed.events)
        assert sorted(d["id"] for d in dd.canonical_documents()) == ["a", "s"]
        assert list(dd.clusters()) == []
        assert len(list(dd.clusters(min_size=1))) == 2
        assert "cover-changed" in [e["event"] for e in events[0]]  # a left the index when b arrived


def test_minhash_is_datasketchs_and_works_with_minhashlsh() -> None:
    rng = random.Random(9)
    base = text(rng)
    with Deduper.memory(num_perm=128, seed=3, learn_boilerplate=False) as dd:
        ours = dd.minhash(base)
        oracle = MinHash(num_perm=128, seed=3, hashfunc=shingle_hash)
        oracle.update_batch(shingles(Normalizer().normalize(base), dd.params.shingle))
        assert np.array_equal(ours.hashvalues, oracle.hashvalues) and ours.seed == 3
        dd.add_many([("a", base), ("far", text(rng))])
        assert [m.id for m in dd.query_minhash(oracle)] == ["a"]
        copy = dd.minhash(edit(rng, base, 2))
        assert [m.id for m in dd.query_minhash(copy, threshold=0.5)] == ["a"]
        assert dd.query_minhash(copy, threshold=1.0) == []
        lsh = MinHashLSH(threshold=0.8, num_perm=128)  # our MinHash objects go into datasketch's index too
        lsh.insert("a", dd.minhash(base))
        assert lsh.query(copy) == ["a"]
        with pytest.raises(ConfigError, match="permutations"):
            dd.query_minhash(MinHash(num_perm=64, seed=3))
        with pytest.raises(ConfigError, match="seed"):
            dd.query_minhash(MinHash(num_perm=128, seed=1))


def test_query_equals_add_on_real_newsgroups(newsgroups: list[dict[str, object]]) -> None:
    # real mail: quoted replies, signatures, "Re:" titles, one source per newsgroup; boilerplate
    # learned from 20 documents on so that learned lines are stripped within the run
    docs = [{k: v for k, v in d.items() if k in ("id", "text", "title", "source")} for d in newsgroups[:400]]
    with Deduper.memory(boilerplate_min_docs=20) as dd:
        for doc in docs:
            answer = dd.query(str(doc["text"]), doc.get("title"), doc.get("source"), doc_id=str(doc["id"]))  # type: ignore[arg-type]
            assert comparable(answer.decision) == comparable(dd.add(doc)), doc["id"]
        assert dd.engine.boilerplate is not None and dd.engine.boilerplate.learned


def test_a_state_written_by_the_api_is_a_state_of_the_command_line(tmp_path: Path) -> None:
    import orjson

    from tests.test_cli import cli

    state = tmp_path / "state"
    docs = near_corpus(11, 80)
    with Deduper.open(state, threshold=0.75) as dd:
        dd.add_many(docs)
        ours = [dataclasses.asdict(c) for c in dd.clusters()]
    out = cli("clusters", "--state", str(state)).stdout
    theirs = [orjson.loads(line) for line in out.splitlines()]
    assert (
        ours
        and [
            {
                "label": c["cluster"],
                "canonical": c["canonical"],
                "size": c["size"],
                "members": tuple(c["members"]),
                "representatives": tuple(c["representatives"]),
                "covered_by": c["covered_by"],
            }
            for c in theirs
        ]
        == ours
    )
    more = tmp_path / "more.jsonl"
    more.write_bytes(orjson.dumps({"id": "late", "text": docs[0]["text"]}) + b"\n")
    cli("dedupe", str(more), "--state", str(state), "--no-progress")
    with Deduper.open(state) as dd:  # and back: the command's run continues the same state
        assert dd.params.threshold == 0.75
        assert dd.query(docs[0]["text"], doc_id="late").decision.kind == "unchanged"


def test_query_of_a_known_id_with_new_content_equals_the_recrawl() -> None:
    rng = random.Random(12)
    base, other = text(rng), text(rng)
    with Deduper.memory() as dd:
        dd.add_many([("a", other), ("b", base)])
        changed = edit(rng, base, 1)
        answer = dd.query(changed, doc_id="a")  # a's old version is a singleton: nothing to re-cover
        decision = dd.add(("a", changed))
        assert decision.cluster_size == 2 and decision.cluster == "a"
        assert answer.decision.updated and decision.updated
        assert comparable(answer.decision) == comparable(decision)


def test_a_sharded_state_answers_as_an_unsharded_one(tmp_path: Path) -> None:
    docs = near_corpus(4)
    outcomes = []
    for name, shards in (("plain", None), ("sharded", 2)):
        with Deduper.open(tmp_path / name, boilerplate_min_docs=5, batch_size=64, index_shards=shards) as dd:
            events = [comparable(d) for d in dd.add_many(docs[:150])]
            answers = [comparable(a.decision) for a in dd.query_many(docs[150:])]
            answers += [comparable(a.decision) for a in dd.query_many(docs[:10])]  # re-crawls: the shadow engine
            outcomes.append((events, answers))
        assert (tmp_path / name / "shards").exists() == (shards is not None)
    assert outcomes[0] == outcomes[1]
    with Deduper.open(tmp_path / "sharded") as dd:  # reopened with its shards
        assert [comparable(d) for d in dd.add_many(docs[150:])]


def test_query_of_a_record_the_input_refuses_answers_invalid_as_add_does() -> None:
    """An empty or too long id, or too much metadata: the query answers what add() then decides
    (an outside walk-through got `new` from the worker's query endpoint for each)."""
    body = " ".join(f"word{i}" for i in range(40))
    refused = [
        {"id": "", "text": body},
        {"id": "x" * 600, "text": body},
        {"id": "m", "text": body, "metadata": {str(i): i for i in range(1500)}},
    ]
    with Deduper.memory() as dd:
        asked = dd.query_many(refused)
        added = dd.add_many(refused)
        assert [(a.decision.kind, a.decision.reason) for a in asked] == [(d.kind, d.reason) for d in added]
        assert [d.reason for d in added] == ["missing-id", "id-too-long", "metadata-too-large"]
        assert dd.query_many([{"text": body}])[0].decision.kind == "new"  # no id: a question about the text
