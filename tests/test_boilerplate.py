"""Learned boilerplate: lines recurring across documents of a source are stripped."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson

from bench.synth import footer_corpus
from stream_dedupe.config import BoilerplateConfig, DedupeParams
from stream_dedupe.core.boilerplate import learned_lines
from stream_dedupe.core.engine import DedupeEngine
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
    assert lines == [("portal", 3, "all rights reserved acme corporation"),
                     ("portal", 3, "this page is maintained by the platform team")]
    # the learned set survives reopening the state
    again = DedupeEngine(learning(), store)
    assert again.boilerplate is not None and len(again.boilerplate.learned) == 2


def test_recrawls_do_not_turn_a_page_into_boilerplate(store: KVStore) -> None:
    engine = DedupeEngine(learning(), store)
    for version in range(6):
        engine.process([doc("page", f"{body(1)}\nrevision {version} of this page\n{FOOTER}")])
        engine.commit()
    assert list(learned_lines(StateView(store), 3)) == []


def test_footer_false_duplicates_disappear(tmp_path: Path) -> None:
    corpus = tmp_path / "footer.jsonl"
    corpus.write_bytes(b"".join(orjson.dumps(d) + b"\n" for d in footer_corpus(200, seed=1)))

    def run(*flags: str) -> dict[str, dict[str, int]]:
        out = subprocess.run(
            [sys.executable, "-m", "stream_dedupe", "eval", str(corpus), "--json", "--no-datasketch", *flags],
            capture_output=True, timeout=300, check=True,
        ).stdout
        return {m["method"]: m["families"] for m in orjson.loads(out)["methods"]}

    plain = run()["stream-dedupe verify=exact"]
    learned = run("--learn-boilerplate", "--boilerplate-min-docs", "10")["stream-dedupe verify=exact"]
    assert plain["false_pairs_across_families"] > 15_000  # the shared footer makes everything alike
    # only the documents read before the footer was learned (10 carriers: at most 45 pairs) remain
    assert learned["false_pairs_across_families"] <= 45
    assert learned["found_within_families"] == plain["found_within_families"] == learned["pairs_within_families"]


def test_boilerplate_command_lists_learned_lines(tmp_path: Path) -> None:
    corpus = tmp_path / "c.jsonl"
    corpus.write_bytes(b"".join(orjson.dumps(d) + b"\n" for d in footer_corpus(30, seed=2)))
    state = tmp_path / "s"
    cli = [sys.executable, "-m", "stream_dedupe"]
    subprocess.run([*cli, "dedupe", str(corpus), "--state", str(state), "--learn-boilerplate",
                    "--boilerplate-min-docs", "5", "--no-progress"], check=True, capture_output=True, timeout=300)
    listed = subprocess.run([*cli, "boilerplate", "--state", str(state)], check=True, capture_output=True,
                            timeout=120).stdout.splitlines()
    assert len(listed) == 10  # the 200-word footer is 10 lines of 20 words
    assert all(orjson.loads(x)["source"] == "portal" and orjson.loads(x)["documents"] == 5 for x in listed)
