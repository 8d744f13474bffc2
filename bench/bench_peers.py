"""stream-dedupe beside its peers on one corpus: each system a fresh process, interleaved rounds.

Every system reads the same JSON lines and writes one decision per document (new, or
duplicate-of an earlier document); the wall time of its whole process is measured, start-up
included. The peers get the same normalized word 3-grams as stream-dedupe (its ``Normalizer``
and ``shingles``, pure Python, imported without numba) and the same 128 permutations, and they
verify their LSH candidates by the MinHash estimate at the threshold, as a user's dedup loop
would:

* ``stream-dedupe``: the ``dedupe`` command (RocksDB state on disk, events to a file);
* ``rensa``: ``RMinHash`` per document + ``RMinHashLSH`` (16 bands, its documented layout), in memory;
* ``datasketch``: ``MinHash.bulk`` (MurmurHash3 shingle hash) + ``MinHashLSH``, in memory.

* ``datatrove`` (with ``--datatrove-python``, its own virtualenv): ``MinhashDedup``'s four stages
  over files, one task each (``bench/peer_datatrove.py``), its own normalization, word 3-grams.

Precision and recall of the duplicate decisions are measured against the exact Jaccard ground
truth (``stream_dedupe.quality.allpairs``): a decision "d duplicate-of e" is correct when
J(d, e) >= threshold; recall is the number of correct removals over the number of documents that
have an earlier partner (what a keep-first dedup removes). stream-dedupe's decisions are its final
cover (``duplicate-of`` on arrival, then ``cover-changed``): it keeps the longest copy, so the copy
it removes may be the earlier one (a copy that arrives after a shorter one takes its place). datatrove
names no ``e`` (it removes all but one document per cluster): a removed document counts as correct
when it is truly a duplicate.

    python bench/bench_peers.py --docs 20000 --rounds 3          (make bench-peers)
    python bench/bench_peers.py --rounds 3 --corpus ../shared/data/20newsgroups_bydate.jsonl.gz   (real mail text)
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
THRESHOLD = 0.8
NUM_PERM = 128
SEED = 1
SYSTEMS = ("stream-dedupe", "rensa", "datasketch")


# -- the peers (each runs in its own process: python bench/bench_peers.py --peer NAME IN OUT) ------
def _documents(path: Path) -> tuple[list[str], list[list[bytes]]]:
    from stream_dedupe.config import ShingleSpec
    from stream_dedupe.core.normalize import Normalizer
    from stream_dedupe.core.shingle import shingles

    normalizer, spec = Normalizer(), ShingleSpec()
    ids, sets = [], []
    with open(path, "rb") as fh:
        for line in fh:
            doc = orjson.loads(line)
            ids.append(doc["id"])
            sets.append(shingles(normalizer.normalize(doc["text"]), spec))
    return ids, sets


def _peer_rensa(path: Path) -> list[int | None]:
    from rensa import RMinHash, RMinHashLSH

    _, sets = _documents(path)
    lsh = RMinHashLSH(threshold=THRESHOLD, num_perm=NUM_PERM, num_bands=16)
    sketches: list[Any] = []
    decisions: list[int | None] = []
    for i, items in enumerate(sets):
        sketch = RMinHash(num_perm=NUM_PERM, seed=SEED)
        sketch.update(items)
        best, best_sim = None, THRESHOLD
        for j in lsh.query(sketch):
            sim = sketch.jaccard(sketches[j])
            if sim >= best_sim and (best is None or sim > best_sim or j < best):
                best, best_sim = j, sim
        decisions.append(best)
        lsh.insert(i, sketch)
        sketches.append(sketch)
    return decisions


def _peer_datasketch(path: Path) -> list[int | None]:
    from datasketch import MinHash, MinHashLSH

    from stream_dedupe.core.shingle import shingle_hash

    _, sets = _documents(path)
    sketches = MinHash.bulk(sets, num_perm=NUM_PERM, seed=SEED, hashfunc=shingle_hash)
    lsh = MinHashLSH(threshold=THRESHOLD, num_perm=NUM_PERM)
    decisions: list[int | None] = []
    for i, sketch in enumerate(sketches):
        best, best_sim = None, THRESHOLD
        for j in lsh.query(sketch):
            sim = sketch.jaccard(sketches[j])
            if sim >= best_sim and (best is None or sim > best_sim or j < best):
                best, best_sim = j, sim
        decisions.append(best)
        lsh.insert(i, sketch)
    return decisions


def _run_peer(name: str, path: Path, out: Path) -> None:
    decisions = _peer_rensa(path) if name == "rensa" else _peer_datasketch(path)
    out.write_bytes(orjson.dumps(decisions))


# -- the parent: corpus, ground truth, interleaved rounds, report -----------------------------------
def _corpus(path: Path, docs: int, seed: int, source: Path | None = None) -> None:
    """``docs`` synthetic documents, or the first ``docs`` lines of ``source`` (JSONL, gzipped or not)."""
    if source is not None:
        import itertools

        from stream_dedupe.inputs import read_lines  # as `dedupe` reads files (gzip or not)

        with open(path, "wb") as out:
            raws = (item.raw for item in read_lines(str(source)) if item.raw.strip())
            out.writelines(raw + b"\n" for raw in itertools.islice(raws, docs))
        return
    sys.path.insert(0, str(BENCH))
    from synth import generate

    with open(path, "wb") as out:
        for doc in generate(docs, seed):
            out.write(orjson.dumps(doc) + b"\n")


def _ground_truth(path: Path) -> tuple[list[str], dict[tuple[int, int], float]]:
    import numpy as np

    from stream_dedupe.config import DedupeParams
    from stream_dedupe.core.minhash import MinHasher
    from stream_dedupe.core.normalize import Normalizer
    from stream_dedupe.quality.allpairs import similar_pairs

    docs = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    params = DedupeParams()
    buf, offsets = Normalizer().normalize_batch([d["text"] for d in docs])
    hashes, bounds = MinHasher(params.num_perm, params.seed, params.shingle).shingle_hashes_packed(buf, offsets)
    sets = [np.unique(hashes[bounds[i] : bounds[i + 1]]) for i in range(len(docs))]
    return [d["id"] for d in docs], similar_pairs(sets, THRESHOLD)


def _timed(args: list[str]) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system) of a child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


#: A removal without a named original (datatrove).
REMOVED = -1


def _run_system(
    name: str, corpus: Path, work: Path, ids: list[str], datatrove_python: str | None = None
) -> tuple[tuple[float, float], list[int | None]]:
    out = work / f"{name}.decisions"
    if name == "datatrove":
        assert datatrove_python
        seconds = _timed([datatrove_python, str(BENCH / "peer_datatrove.py"), str(corpus), str(out)])
        removed = set(orjson.loads(out.read_bytes()))
        return seconds, [REMOVED if doc_id in removed else None for doc_id in ids]
    if name == "stream-dedupe":
        shutil.rmtree(work / "state", ignore_errors=True)
        events = work / "events.jsonl"
        seconds = _timed(
            [
                sys.executable,
                "-m",
                "stream_dedupe",
                "dedupe",
                str(corpus),
                "--state",
                str(work / "state"),
                "--events",
                str(events),
                "--no-progress",
            ]
        )
        index = {doc_id: i for i, doc_id in enumerate(ids)}
        decisions: list[int | None] = [None] * len(ids)
        for line in events.read_bytes().splitlines():  # the final cover: arrival events, then its changes
            event = orjson.loads(line)
            kind = event["event"]
            if kind == "duplicate-of":
                decisions[index[event["id"]]] = index[event["of"]]
            elif kind == "new":
                decisions[index[event["id"]]] = None
            elif kind == "cover-changed":
                for doc_id in event["entered"]:
                    decisions[index[doc_id]] = None
                for change in event["left"] + event["moved"]:
                    decisions[index[change["id"]]] = index[change["representative"]]
        return seconds, decisions
    seconds = _timed([sys.executable, str(Path(__file__).resolve()), "--peer", name, str(corpus), str(out)])
    return seconds, orjson.loads(out.read_bytes())


def _scores(decisions: list[int | None], truth: dict[tuple[int, int], float]) -> dict[str, float]:
    truly = {j for _, j in truth}
    predicted = [(j, of) for j, of in enumerate(decisions) if of is not None]
    correct = [(j, of) for j, of in predicted if (j in truly if of == REMOVED else (min(j, of), max(j, of)) in truth)]
    return {
        "duplicates_decided": len(predicted),
        "true_duplicates": len(truly),
        "precision": len(correct) / len(predicted) if predicted else 1.0,
        # correct removals over the removals a keep-first dedup makes (one a document with an earlier
        # partner): stream-dedupe keeps the longest copy, so the one it drops may be the earlier one
        "recall": len(correct) / len(truly) if truly else 1.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=2026, help="corpus seed (held out: not a tuning seed)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument(
        "--corpus", type=Path, help="a JSONL corpus (.jsonl, .jsonl.gz) instead of synth.py: its first --docs lines"
    )
    parser.add_argument("--datatrove-python", help="python of a virtualenv with datatrove: also run it")
    parser.add_argument("--peer", nargs=3, metavar=("NAME", "INPUT", "OUTPUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peer:
        _run_peer(args.peer[0], Path(args.peer[1]), Path(args.peer[2]))
        return
    # Every system runs as an installed package, with bytecode caches (pip compiles a package at
    # install; an editable checkout under PYTHONDONTWRITEBYTECODE=1 would compile ours in every run).
    compileall.compile_dir(REPO / "stream_dedupe", quiet=1)
    with tempfile.TemporaryDirectory(prefix="sd-bench-peers-") as tmp:
        work = Path(tmp)
        corpus = work / "corpus.jsonl"
        _corpus(corpus, args.docs, args.seed, args.corpus)
        ids, truth = _ground_truth(corpus)
        args.docs = len(ids)
        systems = SYSTEMS + (("datatrove",) if args.datatrove_python else ())
        walls: dict[str, list[float]] = {name: [] for name in systems}
        cpus: dict[str, list[float]] = {name: [] for name in systems}
        decisions: dict[str, list[int | None]] = {}
        for round_number in range(args.rounds):
            order = systems[round_number % len(systems) :] + systems[: round_number % len(systems)]
            for name in order:
                (seconds, cpu), decisions[name] = _run_system(name, corpus, work, ids, args.datatrove_python)
                walls[name].append(seconds)
                cpus[name].append(cpu)
                print(f"round {round_number + 1}: {name:<14} {seconds:7.2f} s wall {cpu:7.2f} s cpu", file=sys.stderr)
        size = corpus.stat().st_size
    median = {name: statistics.median(w) for name, w in walls.items()}
    cpu_median = {name: statistics.median(c) for name, c in cpus.items()}
    results = {
        "docs": args.docs,
        "corpus_bytes": size,
        "rounds": args.rounds,
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, load average {os.getloadavg()[0]:.1f} at the end",
        "systems": {
            name: {
                "wall_s_median": median[name],
                "wall_s_all": walls[name],
                "cpu_s_median": cpu_median[name],
                "cpu_vs_datasketch": cpu_median["datasketch"] / cpu_median[name],
                "cpu_vs_rensa": cpu_median["rensa"] / cpu_median[name],
                "docs_per_s": args.docs / median[name],
                "vs_datasketch": median["datasketch"] / median[name],
                "vs_rensa": median["rensa"] / median[name],
                **_scores(decisions[name], truth),
            }
            for name in systems
        },
    }
    print(f"{args.docs:,} documents, {size / args.docs:,.0f} bytes each on average; {results['machine']}")
    print(
        "| system | wall s (median) | docs/s | vs datasketch | vs rensa | CPU s (median) | CPU vs datasketch "
        "| CPU vs rensa | precision | recall |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, r in results["systems"].items():
        print(
            f"| {name} | {r['wall_s_median']:.2f} | {r['docs_per_s']:,.0f} | {r['vs_datasketch']:.2f}x | "
            f"{r['vs_rensa']:.2f}x | {r['cpu_s_median']:.2f} | {r['cpu_vs_datasketch']:.2f}x | "
            f"{r['cpu_vs_rensa']:.2f}x | {r['precision']:.4f} | {r['recall']:.4f} |"
        )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
