"""Small corpus builders and tool look-ups shared by tests."""

from __future__ import annotations

import random
import shutil

import orjson

from stream_dedupe.core.records import Document, Invalid, parse_document

VOCAB = [f"w{i}" for i in range(3000)]


def text(rng: random.Random, n: int = 120) -> str:
    return " ".join(rng.choice(VOCAB) for _ in range(n))


def edit(rng: random.Random, base: str, changes: int) -> str:
    words = base.split()
    for _ in range(changes):
        words[rng.randrange(len(words))] = rng.choice(VOCAB)
    return " ".join(words)


def doc(doc_id: str, body: str, **extra: object) -> Document | Invalid:
    return parse_document(orjson.dumps({"id": doc_id, "text": body, **extra}), 1 << 20)


def corpus(seed: int = 7, families: int = 30, copies: int = 3) -> list[tuple[str, str]]:
    """Families of near-duplicates (1-2 word edits of a base) plus unrelated singles."""
    rng = random.Random(seed)
    out = []
    for f in range(families):
        base = text(rng)
        out.append((f"f{f:03d}-0", base))
        for c in range(1, copies):
            out.append((f"f{f:03d}-{c}", edit(rng, base, rng.randint(1, 2))))
        out.append((f"s{f:03d}", text(rng)))
    return out


def promtool() -> str:
    """The path of Prometheus's ``promtool``; never a skip: ``make test`` installs it (target ``tools``)."""
    path = shutil.which("promtool")
    if path is None:
        raise FileNotFoundError("promtool is not installed: run `make tools` (Debian package prometheus)")
    return path
