"""The evidence behind the defaults: num_perm, margins and the short-document cutoff, by eval.

    python bench/sweep_defaults.py [--corpus ../shared/data/20newsgroups_bydate.jsonl.gz]

Prints one markdown row per variant: precision and recall against exact Jaccard at 0.8 for both
verification modes, candidates per document and the LSH layout (docs/quality.md has the table).
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from stream_dedupe.config import DedupeParams
from stream_dedupe.core.layout import resolve
from stream_dedupe.inputs import read_lines
from stream_dedupe.quality.evaluate import evaluate

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"

VARIANTS: list[tuple[str, dict[str, object]]] = [
    ("num_perm 64", {"num_perm": 64}),
    ("num_perm 128 (default)", {}),
    ("num_perm 256", {"num_perm": 256}),
    ("estimate_margin 0.0", {"estimate_margin": 0.0}),
    ("estimate_margin 0.02", {"estimate_margin": 0.02}),
    ("lsh_margin 0.1", {"lsh_margin": 0.1}),
    ("lsh_margin 0.3", {"lsh_margin": 0.3}),
    ("min_tokens 5", {"min_tokens": 5}),
    ("min_tokens 20", {"min_tokens": 20}),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default=str(DATA / "20newsgroups_bydate.jsonl.gz"))
    args = parser.parse_args()
    raws = [item.raw for item in read_lines(args.corpus) if item.raw.strip()]
    print("| variant | bands x rows | in scope | estimate P | estimate R | exact P | exact R | candidates/doc |")
    print("|---|---|---|---|---|---|---|---|")
    for name, changes in VARIANTS:
        params = resolve(dataclasses.replace(DedupeParams(), **changes))  # type: ignore[arg-type]
        report = evaluate(raws, params, datasketch=False)
        est, exact = report.methods[0], report.methods[1]
        print(
            f"| {name} | {params.bands} x {params.rows} | {report.in_scope:,} | {est.scores.precision:.3f} "
            f"| {est.scores.recall:.3f} | {exact.scores.precision:.3f} | {exact.scores.recall:.3f} "
            f"| {exact.candidates_per_doc:.3f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
