"""The deciding process's own work a document, preparing batches itself (``--jobs 1``) or given them (``--jobs N``).

With ``--jobs N`` the signing processes parse each batch's lines, sign the documents and split
them into boilerplate lines (``sign_pool._prepare``), and the deciding process only unpacks
that and decides. This measures both sides of the deciding process's work, batch by batch and
interleaved in one process (two engines, each with its own RocksDB state), so the machine's
noise falls on both alike: the ratio is how much faster the decider can go with a free core for
the signing processes. What the signing processes' output costs to make is not counted (it is
made before the clock starts); nor is the pipe between the processes.

    .venv/bin/python bench/jobs_parent.py --corpus ../shared/data/20newsgroups_bydate.jsonl.gz
    .venv/bin/python bench/jobs_parent.py --docs 20000   # bench/synth.py documents
"""

from __future__ import annotations

import argparse
import pickle
import sys
import tempfile
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from synth import generate

from stream_dedupe import embedded, sign_pool
from stream_dedupe.config import DedupeParams
from stream_dedupe.core import jit
from stream_dedupe.core.engine import DedupeEngine
from stream_dedupe.core.records import parse_line
from stream_dedupe.inputs import InputLine, read_lines
from stream_dedupe.storage.rocks import RocksStore

BATCH = 512
MAX_DOC_BYTES = 1 << 20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", help="a JSONL file (plain or gzip); default: --docs synthetic documents")
    parser.add_argument("--docs", type=int, default=20000)
    args = parser.parse_args()
    if args.corpus:
        lines = [item.raw for item in read_lines(args.corpus)]
    else:
        lines = [orjson.dumps(d) for d in generate(args.docs, 2026, 0.3)]
    jit.enable()
    params = DedupeParams()
    batches = [
        [InputLine("bench", i + j + 1, raw, 0) for j, raw in enumerate(lines[i : i + BATCH])]
        for i in range(0, len(lines), BATCH)
    ]
    given = [
        pickle.dumps(sign_pool._prepare(params, [item.raw for item in b], MAX_DOC_BYTES), protocol=5) for b in batches
    ]
    with tempfile.TemporaryDirectory() as tmp:
        itself = DedupeEngine(params, RocksStore(Path(tmp) / "itself"))
        helped = DedupeEngine(params, RocksStore(Path(tmp) / "helped"))
        alone = with_pool = 0.0
        same = True
        for batch, blob in zip(batches, given, strict=True):
            started = time.perf_counter()
            records = [parse_line(item.raw, MAX_DOC_BYTES) for item in batch]
            a = itself.process(records)
            itself.commit()
            alone += time.perf_counter() - started
            started = time.perf_counter()
            _, records, signed, text_lines = embedded._unpacked(helped, batch, pickle.loads(blob), MAX_DOC_BYTES)
            b = helped.process(records, None, signed, text_lines)
            helped.commit()
            with_pool += time.perf_counter() - started
            same = same and a == b
    n = len(lines)
    print(f"{n:,} documents in batches of {BATCH}; the same events both ways: {same}")
    print("| deciding process | us a document |\n|---|---|")
    print(f"| prepares its batches (`--jobs 1`) | {alone / n * 1e6:.1f} |")
    print(f"| given them (`--jobs N`) | {with_pool / n * 1e6:.1f} |")
    print(f"| ratio | {alone / with_pool:.2f}x |")


if __name__ == "__main__":
    main()
