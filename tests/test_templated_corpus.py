"""The corpus generators of issue 12: AWS CLI reference pages from botocore, the shared-footer test."""

from __future__ import annotations

import gzip
import subprocess
import sys
import zipfile
from pathlib import Path

import orjson
import pytest

from bench.footer_corpus import FOOTER, first_own_line, footer_words
from bench.footer_corpus import generate as footer_generate
from bench.templated_corpus import Release, first_sentence, generate, installed_release, strip_html, xform_name
from stream_dedupe.config import DedupeParams
from stream_dedupe.quality.exact import jaccard, shingle_sets

from .conftest import NEWSGROUPS, shared_file

ROOT = Path(__file__).resolve().parents[1]


def test_helpers() -> None:
    assert xform_name("DescribeDBInstances") == "describe-db-instances"
    assert xform_name("ListTagsForResource") == "list-tags-for-resource"
    assert (
        strip_html("<p>Lists the <code>tags</code> &amp; more.</p><p>Second.</p>") == "Lists the tags & more.\nSecond."
    )
    assert first_sentence("Creates a queue. It is new.\nMore") == "Creates a queue."


def _small_release(tmp_path: Path, services: tuple[str, ...]) -> Release:
    """A wheel-shaped zip holding the installed models of a few services (an 'older release')."""
    data = installed_release().root
    wheel = tmp_path / "botocore-0.0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for service in services:
            for path in (data / service).rglob("*"):
                if path.is_file():
                    zf.write(path, f"botocore/data/{path.relative_to(data)}")
    return Release("0.0.1", wheel)


def test_tracks_of_one_operation_share_its_label(tmp_path: Path) -> None:
    small = _small_release(tmp_path, ("sqs", "sns"))
    assert set(small.services()) == {"sqs", "sns"}
    pages = list(generate([small, installed_release()], None, 1, 4))
    entities = {p["entity"] for p in pages}
    assert len({p["id"] for p in pages}) == len(pages) == 2 * len(entities)  # both releases have every operation
    sets, _ = shingle_sets([p["text"] for p in pages], DedupeParams())
    by_entity: dict[str, list[int]] = {}
    for i, page in enumerate(pages):
        assert page["title"] == f"aws {page['entity']}" and page["text"].startswith(page["title"])
        assert page["source"] == "aws-cli-reference" and "Global Options" in page["text"]
        assert page["query"] and page["query"] in page["text"]
        by_entity.setdefault(page["entity"], []).append(i)
    # the same model rendered in two releases differs only in the release line
    assert all(jaccard(sets[a], sets[b]) >= 0.9 for a, b in by_entity.values())
    assert "sqs send-message" in entities and "sns publish" in entities
    v1 = next(generate([small], 3, 1, 1, layout="v1"))
    assert "Global Options" not in v1["text"] and "See 'aws help'" in v1["text"]


def _run(out: Path, *args: str) -> bytes:
    subprocess.run(
        [sys.executable, str(ROOT / "bench" / "templated_corpus.py"), "--out", str(out), "--no-old-release", *args],
        check=True,
        capture_output=True,
        timeout=300,
        cwd=ROOT,
    )
    return out.read_bytes()


def test_templated_corpus_is_deterministic(tmp_path: Path) -> None:
    first = _run(tmp_path / "a.jsonl", "--entities", "25", "--seed", "4")
    assert first == _run(tmp_path / "b.jsonl", "--entities", "25", "--seed", "4")
    assert first != _run(tmp_path / "c.jsonl", "--entities", "25", "--seed", "5")
    docs = [orjson.loads(line) for line in first.splitlines()]
    assert len({d["entity"] for d in docs}) == 25


@pytest.fixture(scope="module")
def posts() -> list[dict[str, object]]:
    with gzip.open(shared_file(NEWSGROUPS)) as fh:
        return [orjson.loads(next(fh)) for _ in range(300)]


def test_footer_corpus(posts: list[dict[str, object]]) -> None:
    assert footer_words() == 105
    repost = {**posts[10], "id": "repost-of-10"}
    sample = [*posts, repost]
    docs = footer_generate(sample, len(sample), 1)
    assert docs == footer_generate(sample, len(sample), 1)  # same seed, same documents
    assert [d["id"] for d in footer_generate(sample, 50, 1)] != [d["id"] for d in footer_generate(sample, 50, 2)]
    assert all(d["text"].endswith(FOOTER + "\n") and d["source"] == "forum" for d in docs)
    by_id = {d["id"]: d for d in docs}
    assert by_id["repost-of-10"]["entity"] == by_id[str(posts[10]["id"])]["entity"]
    assert len({d["entity"] for d in docs}) < len(docs)


def test_first_own_line() -> None:
    post = (
        "From: a@b\nSubject: x\n\nIn article <1@b> c writes:\n"
        "> quoted words that are many here\nMy own words are these ones.\n"
    )
    assert first_own_line(post) == "My own words are these ones."
