"""``explain`` gives the engine's verdict: its rules (title guard, min_tokens, per-source thresholds, boilerplate)."""

from __future__ import annotations

import random
from typing import Any

import pytest

from stream_dedupe.api import Deduper

from .helpers import edit, text


def _pair_in_engine(dd: Deduper, a: str, b: str) -> bool:
    return any(other == b for other, _, _ in dd.engine.state.edges(a))


def _judge(docs: list[dict[str, Any]], **params: Any) -> tuple[bool, bool, str, str | None]:
    with Deduper.memory(**params) as dd:
        dd.add_many(docs)
        report = dd.explain(docs[0]["id"], docs[1]["id"])
        return report.duplicate, _pair_in_engine(dd, docs[0]["id"], docs[1]["id"]), report.reason, report.stored


def test_different_titles_under_the_title_guard_are_not_duplicates() -> None:
    body = text(random.Random(1))
    docs = [{"id": "x1", "text": body, "title": "Alpha"}, {"id": "x2", "text": body, "title": "Beta"}]
    verdict, paired, reason, stored = _judge(docs)
    assert (verdict, paired) == (False, False)
    assert "title" in reason and stored == "not paired, in different clusters"
    same_title = [{**docs[0]}, {**docs[1], "title": "alpha"}]  # the same title, normalized
    verdict, paired, reason, stored = _judge(same_title)
    assert verdict and paired and "same normalized text" in reason and stored == "a verified pair: exact copies"


def test_a_source_threshold_decides_the_pair() -> None:
    rng = random.Random(4)
    base = text(rng, 200)
    near = edit(rng, base, 4)  # about 0.9 similar
    docs = [{"id": "a", "text": base, "source": "strict"}, {"id": "b", "text": near, "source": "strict"}]
    verdict, paired, reason, _ = _judge(docs, source_thresholds={"strict": 0.97})
    assert (verdict, paired) == (False, False) and "0.97" in reason
    verdict, paired, reason, stored = _judge(docs)
    assert verdict and paired and "0.8" in reason and stored is not None and stored.startswith("a verified pair at")


def test_documents_under_min_tokens_pair_only_as_exact_copies() -> None:
    rng = random.Random(2)
    short = text(rng, 10)
    docs = [{"id": "a", "text": short}, {"id": "b", "text": edit(rng, short, 1)}]
    verdict, paired, reason, _ = _judge(docs, min_tokens=20, threshold=0.5)
    assert (verdict, paired) == (False, False) and "min_tokens (20)" in reason
    copies = [docs[0], {"id": "b", "text": short.upper()}]
    verdict, paired, _, _ = _judge(copies, min_tokens=20)
    assert verdict and paired


@pytest.mark.parametrize("learn", [True, False])
def test_texts_are_judged_without_their_learned_boilerplate(learn: bool) -> None:
    """Two short pages under one long footer: alike until the footer is learned and stripped."""
    rng = random.Random(6)
    footer = "\n".join(" ".join(f"legal{i}x{j}" for j in range(20)) for i in range(6))
    pages = [{"id": f"p{i}", "text": f"{text(rng, 12)}\n{footer}", "source": "portal"} for i in range(6)]
    with Deduper.memory(learn_boilerplate=learn, boilerplate_min_docs=3) as dd:
        dd.add_many(pages)
        before = dd.engine.counters["boilerplate_lines_stripped"]
        report = dd.explain("p0", "p1")
        assert report.duplicate == _pair_in_engine(dd, "p0", "p1") == (not learn)
        assert dd.engine.counters["boilerplate_lines_stripped"] == before  # a question, not a run
