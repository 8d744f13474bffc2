"""The shared-footer test: unrelated 20 Newsgroups posts that all end with one licence footer.

A seeded draw of ``--docs`` posts (default 3,000) from ``20newsgroups_bydate.jsonl.gz``, each
followed by the same 105-word licence footer (six lines, as a forum would append it). Sharing the
footer must not make unrelated posts duplicates. The ``entity`` label says what "same document"
means here: posts whose *bodies* (without the footer) have exact word-3-gram Jaccard >= 0.8 are
one entity (real reposts in 20 Newsgroups; connected components), every other post is its own.
``query`` is a known-item query: the post's first line of its own text (not a header, quote or
attribution) of at least five words, cut to 20 words.

    python bench/footer_corpus.py --out /tmp/footer.jsonl
"""

from __future__ import annotations

import argparse
import gzip
import random
import re
import sys
from pathlib import Path
from typing import Any

import orjson

from stream_dedupe.config import DedupeParams
from stream_dedupe.quality.allpairs import similar_pairs
from stream_dedupe.quality.exact import shingle_sets
from stream_dedupe.quality.metrics import components

DEFAULT_INPUT = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "20newsgroups_bydate.jsonl.gz"
SOURCE = "forum"
FOOTER = """\
This post is shared under the Community Posting Licence, version 2.1, as published by the forum.
You may copy, redistribute and adapt it in any medium or format, for any purpose, even commercially,
provided that you give appropriate credit to the original author, link to the licence,
and indicate clearly whether any changes were made; you may do so in any reasonable manner, but not in any way
that suggests the author endorses you or your use. No warranties are given. The licence may not give you
all of the permissions necessary for your intended use: other rights may limit how you use the material."""
_HEADER = re.compile(r"^[A-Za-z-]+: ")


def footer_words() -> int:
    """Words in the footer (105)."""
    return len(FOOTER.split())


def first_own_line(text: str) -> str:
    """The first line of a post's own text: after the headers, not a quote or an attribution."""
    lines = text.split("\n")
    body = lines[lines.index("") + 1 :] if "" in lines else lines
    for line in body:
        stripped = line.strip()
        if stripped.startswith((">", "|", ":")) or _HEADER.match(stripped) or "writes:" in stripped:
            continue
        if "wrote:" in stripped or stripped.lower().startswith("in article"):
            continue
        words = stripped.split()
        if len(words) >= 5:
            return " ".join(words[:20])
    return ""


def generate(posts: list[dict[str, Any]], docs: int, seed: int, threshold: float = 0.8) -> list[dict[str, Any]]:
    """``docs`` posts drawn with ``seed``, each with the footer appended and its entity label."""
    chosen = sorted(random.Random(seed).sample(range(len(posts)), min(docs, len(posts))))
    sample = [posts[i] for i in chosen]
    sets, _ = shingle_sets([p["text"] for p in sample], DedupeParams(threshold=threshold))
    labels = components(len(sample), similar_pairs(sets, threshold))
    out = []
    for post, label in zip(sample, labels, strict=True):
        out.append(
            {
                "id": post["id"],
                "text": f"{post['text'].rstrip()}\n\n{FOOTER}\n",
                "source": SOURCE,
                "entity": sample[label]["id"],
                "query": first_own_line(post["text"]),
                "group": post.get("group"),
            }
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input", type=Path, default=DEFAULT_INPUT)
    parser.add_argument("--out", type=Path, default=Path("/tmp/footer.jsonl"))
    parser.add_argument("--docs", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    with gzip.open(args.input, "rb") as fh:
        posts = [orjson.loads(line) for line in fh if line.strip()]
    docs = generate(posts, args.docs, args.seed)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "wb") as out:
        out.write(b"".join(orjson.dumps(d) + b"\n" for d in docs))
    entities = len({d["entity"] for d in docs})
    print(
        f"wrote {len(docs):,} posts ({entities:,} entities) with a {footer_words()}-word footer to {args.out}",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
