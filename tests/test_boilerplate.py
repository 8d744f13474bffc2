"""Learned boilerplate: lines recurring across documents of a source are stripped."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from bench.synth import footer_corpus
from stream_dedupe.config import BoilerplateConfig, DedupeParams
from stream_dedupe.core.boilerplate import learned_lines
from stream_dedupe.core.engine import DedupeEngine
from stream_dedupe.core.records import Deletion
from stream_dedupe.storage.base import KVStore
from stream_dedupe.storage.state import StateView

from .helpers import doc

FOOTER = "this page is maintained by the platform team\nall rights reserved acme corporation"


def learning(min_docs: int = 3) -> DedupeParams:
    return DedupeParams(boilerplate=BoilerplateConfig(learn=True, min_docs=min_docs))


def body(i: int) -> str:
    return " ".join(f"topic{i} word{i}x{j}" for j in range(12))


def test_lines_are_learned_per_source_and_stripped(store: KVStore) -> None:
    engine = DedupeEngine(learning(), store)
    docs = [doc(f"p{i}", f"{body(i)}\n{FOOTER}", source="portal") for i in range(5)]
    docs.append(doc("w0", f"{body(50)}\n{FOOTER}", source="wiki"))
    engine.process(docs)
    engine.commit()
    # the first three carriers kept the footer; the fourth and fifth of the portal had both lines stripped
    assert engine.counters["boilerplate_lines_stripped"] == 4
    lines = sorted(learned_lines(StateView(store), 3))
    assert lines == [
        ("portal", 3, "all rights reserved acme corporation"),
        ("portal", 3, "this page is maintained by the platform team"),
    ]
    # the learned set survives reopening the state
    again = DedupeEngine(learning(), store)
    assert again.boilerplate is not None and len(again.boilerplate.learned) == 2


def test_recrawls_do_not_turn_a_page_into_boilerplate(store: KVStore) -> None:
    engine = DedupeEngine(learning(), store)
    for version in range(6):
        engine.process([doc("page", f"{body(1)}\nrevision {version} of this page\n{FOOTER}")])
        engine.commit()
    assert list(learned_lines(StateView(store), 3)) == []


@pytest.mark.parametrize("batched", [False, True])
def test_a_page_deleted_and_added_again_is_not_counted_again(store: KVStore, batched: bool) -> None:
    """The carriers of a line name the documents counted: one page that comes and goes counts once.

    It goes as a deletion, or as a re-crawl whose text has no words (``empty-text``, which takes
    it out of the index); ``batched``: the removal and the return in one batch.
    """
    engine = DedupeEngine(learning(), store)
    own = f"{body(1)}\nthis line is only ever on the one page\n{FOOTER}"
    engine.process([doc("page", own)])
    engine.commit()
    for cycle in range(5):
        gone = Deletion("page") if cycle % 2 else doc("page", "  ...  ")
        steps = [[gone, doc("page", own)]] if batched else [[gone], [doc("page", own)]]
        for records in steps:
            engine.process(records)
            engine.commit()
    assert list(learned_lines(StateView(store), 3)) == []
    assert engine.counters["boilerplate_lines_stripped"] == 0
    # two other pages with the footer make three documents: the footer is learned, the page's own line is not
    engine.process([doc("other1", f"{body(2)}\n{FOOTER}"), doc("other2", f"{body(3)}\n{FOOTER}")])
    engine.commit()
    assert sorted(line for _, _, line in learned_lines(StateView(store), 3)) == sorted(FOOTER.split("\n"))


def test_footer_false_duplicates_disappear(tmp_path: Path) -> None:
    corpus = tmp_path / "footer.jsonl"
    corpus.write_bytes(b"".join(orjson.dumps(d) + b"\n" for d in footer_corpus(200, seed=1)))

    def run(*flags: str) -> dict[str, dict[str, int]]:
        out = subprocess.run(
            [sys.executable, "-m", "stream_dedupe", "eval", str(corpus), "--json", "--no-datasketch", *flags],
            capture_output=True,
            timeout=300,
            check=True,
        ).stdout
        return {m["method"]: m["families"] for m in orjson.loads(out)["methods"]}

    plain = run("--no-learn-boilerplate")["stream-dedupe verify=exact"]
    learned = run("--boilerplate-min-docs", "10")["stream-dedupe verify=exact"]  # learning is on by default
    assert plain["false_pairs_across_families"] > 15_000  # the shared footer makes everything alike
    # learning is retroactive: the 10 documents read before the footer was learned lose it too
    assert learned["false_pairs_across_families"] == 0
    assert learned["found_within_families"] == plain["found_within_families"] == learned["pairs_within_families"]


def test_boilerplate_command_lists_learned_lines(tmp_path: Path) -> None:
    corpus = tmp_path / "c.jsonl"
    corpus.write_bytes(b"".join(orjson.dumps(d) + b"\n" for d in footer_corpus(30, seed=2)))
    state = tmp_path / "s"
    cli = [sys.executable, "-m", "stream_dedupe"]
    subprocess.run(
        [
            *cli,
            "dedupe",
            str(corpus),
            "--state",
            str(state),
            "--learn-boilerplate",
            "--boilerplate-min-docs",
            "5",
            "--no-progress",
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    listed = subprocess.run(
        [*cli, "boilerplate", "--state", str(state)], check=True, capture_output=True, timeout=120
    ).stdout.splitlines()
    assert len(listed) == 10  # the 200-word footer is 10 lines of 20 words
    assert all(orjson.loads(x)["source"] == "portal" and orjson.loads(x)["documents"] == 5 for x in listed)


def test_learning_is_retroactive_and_order_independent() -> None:
    """Carriers read before a line was learned are signed again: any order gives the same state."""
    import random

    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from stream_dedupe.exports import iter_canonical_documents, iter_clusters
    from stream_dedupe.storage.memory import MemoryStore

    rng = random.Random(3)
    footer = "\n".join(" ".join(f"legal{i}x{j}" for j in range(8)) for i in range(4))
    bodies = [" ".join(f"w{rng.randrange(400)}" for _ in range(18)) for _ in range(8)]
    docs = []
    for i in range(24):
        text = bodies[i % 8] + (f" edit{i}" if i >= 8 else "")
        docs.append((f"d{i:02d}", f"{text}\n{footer}" if i % 3 else text))

    def final(order: list[int], batch: int) -> tuple[object, ...]:
        store = MemoryStore()
        engine = DedupeEngine(learning(min_docs=4), store)
        items = [doc(docs[i][0], docs[i][1], source="site") for i in order]
        for start in range(0, len(items), batch):
            engine.process(items[start : start + batch])  # type: ignore[arg-type]
            engine.commit()
        return list(iter_clusters(store, min_size=1)), sorted(iter_canonical_documents(store))

    reference = final(list(range(len(docs))), 24)

    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.permutations(list(range(len(docs)))), st.integers(1, 9))
    def check(order: list[int], batch: int) -> None:
        assert final(order, batch) == reference

    check()
    # and the footer did not make the 8 unrelated bodies duplicates of each other
    clusters, _ = reference  # type: ignore[misc]
    assert all(len({m[1:] for m in c["members"]}) >= 1 for c in clusters)  # type: ignore[index]
    assert len(clusters) == 8  # type: ignore[arg-type]


def test_the_command_line_reads_min_docs_0_as_off_as_the_worker_does(tmp_path: Path) -> None:
    """``--boilerplate-min-docs 0`` is "off" in the worker; the embedded commands once read it as the default (100)."""
    import pytest

    from stream_dedupe.errors import ConfigError
    from stream_dedupe.options import boilerplate_config

    assert boilerplate_config(None, 0, None) == BoilerplateConfig(learn=False)
    assert boilerplate_config(False, 0, None) == BoilerplateConfig(learn=False)
    assert boilerplate_config(None, 7, None) == BoilerplateConfig(learn=True, min_docs=7)
    assert boilerplate_config(None, None, None) is None
    with pytest.raises(ConfigError, match="contradict"):
        boilerplate_config(True, 0, None)
    with pytest.raises(ConfigError, match="min_tokens must be at least 1"):  # not silently 3
        boilerplate_config(None, None, 0)
    state = tmp_path / "state"
    corpus = tmp_path / "docs.jsonl"
    corpus.write_bytes(b"".join(orjson.dumps(d) + b"\n" for d in footer_corpus(30, seed=2)))
    cli = [sys.executable, "-m", "stream_dedupe", "dedupe", str(corpus), "--state", str(state), "--no-progress"]
    result = subprocess.run([*cli, "--boilerplate-min-docs", "0"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    from stream_dedupe.core.engine import stored_params
    from stream_dedupe.storage.rocks import RocksStore

    store = RocksStore(state)
    try:
        params = stored_params(store)
        assert params is not None and params.boilerplate.learn is False
    finally:
        store.close()
