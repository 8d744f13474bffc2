"""A JSONL corpus exercising every decision: near-duplicates, exact copies, re-crawls (updates),
deletions, invalid lines, Unicode and learned boilerplate (a footer shared by one source)."""

from __future__ import annotations

import random
from pathlib import Path

import orjson

from .helpers import edit, text

FOOTER = "subscribe to our newsletter for weekly updates and offers"
UNICODE = ["naïve café", "日本語 テキスト", "über straße", "Ｆｕｌｌｗｉｄｔｈ", "emoji 🎉 ok", "e\u0301cole"]


def mixed_lines(seed: int = 3, families: int = 60) -> list[bytes]:
    """Lines of the corpus, in order (about ``5 * families`` lines)."""
    rng = random.Random(seed)
    lines: list[bytes] = []
    bases = []
    for f in range(families):
        base = text(rng, rng.choice([8, 40, 120, 400]))
        if f % 5 == 0:
            base = f"{rng.choice(UNICODE)} {base} {rng.choice(UNICODE)}"
        bases.append(base)
        source = "news" if f % 2 else "blog"
        body = f"{base}\n{FOOTER}" if source == "news" else base
        lines.append(orjson.dumps({"id": f"f{f}", "text": body, "source": source, "title": f"t{f}"}))
        lines.append(orjson.dumps({"id": f"f{f}-near", "text": edit(rng, base, 2), "source": source}))
        if f % 3 == 0:
            lines.append(orjson.dumps({"id": f"f{f}-copy", "text": base, "source": source}))
        if f % 7 == 0:
            lines.append(b"{not json")
            lines.append(orjson.dumps({"text": "no id"}))
            lines.append(orjson.dumps({"id": f"empty{f}", "text": "  ...  "}))
        if f % 4 == 1 and f > 4:  # a re-crawl of an earlier document, changed
            lines.append(orjson.dumps({"id": f"f{f - 4}", "text": edit(rng, bases[f - 4], 30), "source": "news"}))
        lines.append(orjson.dumps({"id": f"s{f}", "text": text(rng, rng.randint(0, 200)), "source": source}))
    return lines


def write_mixed(directory: Path, seed: int = 3, families: int = 60) -> tuple[Path, Path]:
    """Write the corpus and a deletions file (every 9th family's near-duplicate and an unknown id)."""
    corpus = directory / "mixed.jsonl"
    corpus.write_bytes(b"\n".join(mixed_lines(seed, families)) + b"\n")
    deletions = directory / "deletions.txt"
    deletions.write_text("".join(f"f{f}-near\n" for f in range(0, families, 9)) + "never-seen\n")
    return corpus, deletions
