"""One markdown table of retrieval-eval + eval for several option sets on one corpus.

Each option set is passed as one string of ``dedupe`` options (``""`` = defaults); both commands
run in a fresh process with ``--json``. ``eval`` runs both verification modes itself: the row
shows the method of the verification mode the options choose (the engine's default: exact).

    python bench/quality_matrix.py /tmp/templated.jsonl --label-field entity \\
        --options "" " --no-title-guard" "--no-title-guard --no-learn-boilerplate" "--verify estimate"

Re-run it after an engine change to get the AFTER numbers of docs/quality.md.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import time
from typing import Any

import orjson

COLUMNS = [
    "options",
    "kept",
    "dropped",
    "dropped across labels",
    "success@k before",
    "success@k after",
    "recall@k after",
    "lost",
    "gained",
    "redundancy@k before",
    "redundancy@k after",
    "residual pairs",
    "loss",
    "largest cluster",
    "largest cover",
    "seconds",
]


def _run(args: list[str]) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", "stream_dedupe", *args], capture_output=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{out.stderr.decode()}")
    return dict(orjson.loads(out.stdout))


def _eval_options(options: list[str]) -> tuple[list[str], str]:
    """``eval`` runs both verification modes: drop ``--verify X`` and say which method to read."""
    from stream_dedupe.config import DedupeParams

    kept, mode, skip = [], DedupeParams().verify, False  # the engine's default (exact) unless told
    for i, opt in enumerate(options):
        if skip:
            skip = False
            continue
        if opt == "--verify":
            mode, skip = options[i + 1], True
        elif opt.startswith("--verify="):
            mode = opt.split("=", 1)[1]
        elif opt.startswith("--estimate-margin") or opt == "--seed":
            skip = "=" not in opt
        else:
            kept.append(opt)
    return kept, mode


def row(
    corpus: str, options: str, label_field: str | None, k: int, max_queries: int, with_eval: bool, extra: str = ""
) -> tuple[list[str], dict[str, Any] | None]:
    opts = shlex.split(options)
    started = time.perf_counter()
    label = ["--label-field", label_field] if label_field else []
    r = _run(
        [
            "retrieval-eval",
            corpus,
            "--json",
            "--k",
            str(k),
            "--max-queries",
            str(max_queries),
            *label,
            *shlex.split(extra),
            *opts,
        ]
    )
    cells = [
        f"`{options}`" if options else "defaults",
        f"{r['indexed']:,}",
        f"{r['dropped']:,}",
        "-" if r["dropped_across_labels"] is None else f"{r['dropped_across_labels']:,}",
        f"{r['before']['success']:.3f}",
        f"**{r['after']['success']:.3f}**",
        f"{r['after']['recall']:.3f}",
        f"{r['queries_lost']:,}",
        f"{r['queries_gained']:,}",
        f"{r['before']['redundancy']:.3f}",
        f"{r['after']['redundancy']:.3f}",
    ]
    if with_eval:
        eval_opts, mode = _eval_options(opts)
        e = _run(["eval", corpus, "--json", "--no-datasketch", *eval_opts])
        method = next(m for m in e["methods"] if m["method"] == f"stream-dedupe verify={mode}")
        idx = method["index"]
        cells += [
            f"{idx['residual_duplicate_pairs']:,}",
            f"{idx['lost']:,}",
            f"{idx['largest_component']:,}",
            f"{idx['largest_cover']:,}",
        ]
    else:
        cells += ["-"] * 4
    return [*cells, f"{time.perf_counter() - started:.0f}"], r.get("ideal")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus")
    parser.add_argument(
        "--options", nargs="*", default=["", " --no-title-guard", "--no-title-guard --no-learn-boilerplate"]
    )
    parser.add_argument("--label-field", default=None)
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--max-queries", type=int, default=2000)
    parser.add_argument("--no-eval", action="store_true", help="skip eval (its exact ground truth can be slow)")
    parser.add_argument("--retrieval-args", default="", help="more retrieval-eval options, e.g. --query-pattern")
    args = parser.parse_args()
    header = [c.replace("@k", f"@{args.k}") for c in COLUMNS]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    ideal = None
    for options in args.options:
        cells, ideal = row(
            args.corpus, options, args.label_field, args.k, args.max_queries, not args.no_eval, args.retrieval_args
        )
        print("| " + " | ".join(cells) + " |", flush=True)
    if ideal is not None:
        print(
            f"\nideal index (one document per label, {ideal['documents']:,} documents): "
            f"Success@{args.k} {ideal['success']:.3f}, recall@{args.k} {ideal['recall']:.3f}, "
            f"redundancy@{args.k} {ideal['redundancy']:.3f}"
        )


if __name__ == "__main__":
    main()
