"""A replay corpus for the decide path: every kind of record, and the configurations to replay it under.

``tests/test_golden_events.py`` replays it through the engine and compares the event bytes with
golden files written by the engine as of commit 26c95c2 (before the batch fast path), so a speed
change that changes any decision or event fails. Regenerate (only for an intended change of
semantics, with the reason in the commit): ``.venv/bin/python -m tests.golden_corpus``.
"""

from __future__ import annotations

import gzip
import random
from pathlib import Path
from typing import Any

import orjson

from stream_dedupe.config import BoilerplateConfig, DedupeParams
from stream_dedupe.core.engine import DedupeEngine
from stream_dedupe.core.records import Deletion, Record, parse_document
from stream_dedupe.storage.memory import MemoryStore

GOLDEN_DIR = Path(__file__).parent / "data"
_WORDS = [f"w{i}" for i in range(400)]
_FOOTER = [
    "this page is maintained by the platform team please do not reply",
    "copyright the example corporation all rights reserved worldwide",
]

#: name -> (parameters, batch sizes cycled through)
CONFIGS: dict[str, tuple[DedupeParams, tuple[int, ...]]] = {
    "estimate": (DedupeParams(boilerplate=BoilerplateConfig(min_docs=12)), (64, 1, 200, 7)),
    "exact": (
        DedupeParams(threshold=0.6, lsh_margin=0.2, verify="exact", boilerplate=BoilerplateConfig(learn=False)),
        (50, 3, 500),
    ),
    "sources-title": (
        DedupeParams(
            source_thresholds=(("notes", 0.95),), title_guard=True, boilerplate=BoilerplateConfig(min_docs=20)
        ),
        (33, 128, 2),
    ),
}


def _text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(n))


def _edit(rng: random.Random, base: str, changes: int) -> str:
    words = base.split()
    for _ in range(changes):
        words[rng.randrange(len(words))] = rng.choice(_WORDS)
    return " ".join(words)


def corpus(n: int = 1500, seed: int = 15) -> list[bytes]:
    """Raw records: new documents, near and exact duplicates, re-crawls, deletes, invalid ones, chrome."""
    rng = random.Random(seed)
    bases: list[tuple[str, str]] = []
    ids: list[str] = []
    out: list[bytes] = []
    for i in range(n):
        roll = rng.random()
        source = rng.choice(["wiki", "notes", "portal", None])
        doc: dict[str, Any] = {"id": f"d{i:05d}"}
        if roll < 0.04 and ids:
            out.append(orjson.dumps({"id": rng.choice(ids), "deleted": True}))
            continue
        if roll < 0.06:
            out.append(rng.choice([b"not json", b"[1, 2]", b'{"text": "no id"}', b'{"id": 3, "text": "x"}']))
            continue
        if roll < 0.08:
            doc["text"] = rng.choice(["", "   ", "!!! ..."])
            out.append(orjson.dumps(doc))
            continue
        if roll < 0.15 and ids:
            doc["id"] = rng.choice(ids)  # a re-crawl: same id, new or same text
        if roll < 0.45 and bases:
            title, base = rng.choice(bases)
            kind = rng.random()
            if kind < 0.25:
                text = base
            else:
                text = _edit(rng, base, rng.randint(1, 6)) if kind < 0.8 else base[: len(base) * 4 // 5]
        else:
            title, text = f"Title {rng.randint(0, 40)}", _text(rng, rng.randint(30, 140))
            bases.append((title, text))
        if source == "portal":
            text = f"{text}\n{_FOOTER[0]}\n{_FOOTER[1]}"
        doc.update({"text": text, "title": title if rng.random() < 0.7 else None, "source": source})
        if rng.random() < 0.6:
            month, day, hour = rng.randint(1, 12), rng.randint(1, 28), rng.randint(0, 23)
            doc["updated_at"] = f"2026-{month:02d}-{day:02d}T{hour:02d}:00:00Z"
        out.append(orjson.dumps({k: v for k, v in doc.items() if v is not None}))
        ids.append(doc["id"])
    return out


def replay(params: DedupeParams, batches: tuple[int, ...], records: list[bytes] | None = None) -> bytes:
    """Every event of the corpus, one JSON line each, decided in batches of the cycled sizes."""
    raws = corpus() if records is None else records
    engine = DedupeEngine(params, MemoryStore())
    parsed: list[Record] = [parse_document(raw, 1 << 20) for raw in raws]
    lines: list[bytes] = []
    start, turn = 0, 0
    while start < len(parsed):
        size = batches[turn % len(batches)]
        chunk = parsed[start : start + size]
        origins = [{"line": start + k + 1} for k in range(len(chunk))]
        lines.extend(orjson.dumps(e) for e in engine.process(chunk, origins))
        engine.commit()
        start, turn = start + size, turn + 1
    counters = {k: v for k, v in sorted(engine.counters.items())}
    lines.append(orjson.dumps({"counters": counters}))
    assert any(isinstance(r, Deletion) for r in parsed)
    return b"\n".join(lines) + b"\n"


def golden_path(name: str) -> Path:
    """Where the golden events of configuration ``name`` are kept."""
    return GOLDEN_DIR / f"golden-events-{name}.jsonl.gz"


def main() -> None:
    """Write the golden files from the engine as it is now."""
    for name, (params, batches) in CONFIGS.items():
        data = replay(params, batches)
        golden_path(name).write_bytes(gzip.compress(data, mtime=0))
        print(name, len(data.splitlines()), "lines")


if __name__ == "__main__":
    main()
