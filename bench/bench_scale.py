"""Cost at scale (issue 8): docs/s, peak RSS, state bytes/doc and pair quality from 10k to 1M documents.

    python bench/bench_scale.py --sizes 10000,100000,1000000

1. One seeded corpus (``bench/corpus.py``: ~1.7 KB texts, 30k-word Zipf vocabulary, 30% variants in
   known families) of the largest size is written once into ``--workdir`` (kept and reused by
   later runs with the same seed); the smaller sizes are its prefixes. A sample of variants is
   compared with its base by exact word-3-gram Jaccard (the ground truth really is >= 0.8).
2. For each size, in one invocation and back to back, each in a fresh subprocess (peak RSS is
   that process's ``ru_maxrss`` from ``wait4``):

   * **engine**: ``stream_dedupe.embedded.run``, the ``stream-dedupe dedupe`` loop, over the JSONL
     with RocksDB state on disk (default parameters: estimate mode) and events written to a file;
     docs/s over the run (the corpus exists beforehand; kernels are warmed up first). Then, in
     another subprocess: the state directory's bytes after the run (closed), its bytes per
     namespace, the same after a full manual compaction, and the clusters (``iter_clusters``,
     what ``stream-dedupe clusters`` prints);
   * **datasketch**: the same parse, normalization and word shingles, ``MinHash.bulk`` (MurmurHash3
     shingle hash, as ``bench/bench_embedded.py``), in-memory ``MinHashLSH`` query then insert,
     and a ``jaccard >= threshold`` check of each candidate; the verified pairs are the clusters.

3. Quality at every size, from the generator's families: a same-family pair is *found* when both
   documents end in one cluster (recall), a same-cluster pair is *correct* when both are of one
   family (precision); per variant kind, the share of variants clustered with their base.

Writes ``bench/out/scale.json`` and ``bench/out/scale.png`` (copied to ``docs/img/scale.png``).
The machine is shared: each result carries the load average before and after it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from corpus import components, doc_index, jaccard_sample, quality, truth_path, write_corpus  # noqa: E402


# -- children (each runs in its own process) ------------------------------------------------------
def child_engine(corpus: str, state: str, events: str) -> dict[str, Any]:
    """The embedded command's loop over ``corpus`` into a new RocksDB state."""
    from stream_dedupe.config import DedupeParams, RuntimeLimits
    from stream_dedupe.core.engine import DedupeEngine
    from stream_dedupe.core.records import parse_document
    from stream_dedupe.embedded import run
    from stream_dedupe.storage.memory import MemoryStore
    from stream_dedupe.storage.rocks import RocksStore

    with open(corpus, "rb") as fh:  # warm-up: the compiled kernels load from numba's cache here
        head = [parse_document(next(fh), 1 << 20) for _ in range(64)]
    DedupeEngine(DedupeParams(), MemoryStore()).process(head)
    limits = RuntimeLimits()
    t0 = time.perf_counter()
    cpu0, main0 = time.process_time(), time.thread_time()
    store = RocksStore(state)
    engine = DedupeEngine(DedupeParams(), store, limits)
    opened = time.perf_counter()
    with open(events, "wb") as out:
        result = run(engine, [corpus], out, limits.batch_size, limits.max_doc_bytes)
    ran = time.perf_counter()
    cpu, main = time.process_time() - cpu0, time.thread_time() - main0
    store.close()
    closed = time.perf_counter()
    return {
        "docs": result.lines,
        "seconds": ran - opened,
        "docs_per_s": result.lines / (ran - opened),
        "open_seconds": opened - t0,
        "close_seconds": closed - ran,
        "counters": {k: v for k, v in result.counters.items() if k in ("new", "duplicate-of", "invalid")},
        "index_entries": len(engine.lsh),
        # CPU per document (less sensitive to other processes than docs/s): the engine's thread,
        # and every thread of the process (RocksDB's flushes and compactions run in their own)
        "cpu_us_per_doc_main": round(main / result.lines * 1e6, 1),
        "cpu_us_per_doc_all": round(cpu / result.lines * 1e6, 1),
    }


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def child_state(state: str, labels_out: str, docs: int) -> dict[str, Any]:
    """Sizes of a closed state (as left, per namespace, after a full compaction) and its clusters."""
    from stream_dedupe.exports import iter_clusters
    from stream_dedupe.storage.base import NAMESPACES
    from stream_dedupe.storage.rocks import RocksStore

    path = Path(state)
    out: dict[str, Any] = {"after_run_bytes": _dir_bytes(path)}
    store = RocksStore(path)
    logical: dict[str, dict[str, int]] = {}
    for ns in NAMESPACES:
        keys = values = n = 0
        for k, v in store.items(ns):
            keys += len(k)
            values += len(v)
            n += 1
        if n:
            logical[ns] = {"entries": n, "key_bytes": keys, "value_bytes": values}
    out["logical"] = logical
    store.compact()
    out["sst_bytes_compacted"] = store.namespace_bytes()
    labels = np.arange(docs, dtype=np.int64)
    for cluster in iter_clusters(store):
        members = [doc_index(m) for m in cluster["members"]]  # type: ignore[union-attr]
        labels[members] = members[0]
    store.close()
    out["compacted_bytes"] = _dir_bytes(path)
    np.save(labels_out, labels)
    return out


def child_datasketch(corpus: str, pairs_out: str, batch_size: int = 512) -> dict[str, Any]:
    """datasketch ``MinHash.bulk`` + in-memory ``MinHashLSH``, verified pairs written to ``pairs_out``."""
    import orjson
    from datasketch import MinHash, MinHashLSH

    from stream_dedupe.config import DedupeParams
    from stream_dedupe.core.normalize import Normalizer
    from stream_dedupe.core.shingle import shingle_hash, shingles

    params = DedupeParams()
    normalizer = Normalizer()
    threshold = params.threshold
    lsh = MinHashLSH(threshold=threshold, num_perm=params.num_perm)
    sigs: dict[str, MinHash] = {}
    pairs: list[int] = []
    batch: list[tuple[str, list[bytes]]] = []
    duplicates = lines = 0

    def decide() -> None:
        nonlocal duplicates
        sketches = MinHash.bulk(
            [s for _, s in batch], num_perm=params.num_perm, seed=params.seed, hashfunc=shingle_hash
        )
        for (doc_id, _), m in zip(batch, sketches, strict=True):
            verified = [c for c in lsh.query(m) if sigs[c].jaccard(m) >= threshold]
            duplicates += bool(verified)
            for other in verified:
                pairs.extend((doc_index(doc_id), doc_index(other)))
            lsh.insert(doc_id, m)
            sigs[doc_id] = m
        batch.clear()

    started, cpu0 = time.perf_counter(), time.process_time()
    with open(corpus, "rb") as fh:
        for line in fh:
            lines += 1
            doc = orjson.loads(line)
            batch.append((doc["id"], shingles(normalizer.normalize(doc["text"]), params.shingle)))
            if len(batch) == batch_size:
                decide()
    decide()
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu0
    np.save(pairs_out, np.array(pairs, dtype=np.int64).reshape(-1, 2))
    return {
        "docs": lines,
        "seconds": seconds,
        "docs_per_s": lines / seconds,
        "duplicates": duplicates,
        "cpu_us_per_doc_all": round(cpu / lines * 1e6, 1),
    }


CHILDREN = {"_engine": child_engine, "_state": child_state, "_datasketch": child_datasketch}


def spawn(mode: str, *args: str) -> dict[str, Any]:
    """Run a child mode in a fresh interpreter; its JSON result plus its peak RSS."""
    load = os.getloadavg()[0]
    proc = subprocess.Popen([sys.executable, __file__, mode, *args], stdout=subprocess.PIPE, cwd=REPO)
    assert proc.stdout is not None
    output = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{mode} {' '.join(args)} failed with exit code {proc.returncode}")
    result: dict[str, Any] = json.loads(output.decode().strip().splitlines()[-1])
    result["peak_rss_mb"] = round(usage.ru_maxrss / 1024, 1)
    result["load_before"], result["load_after"] = round(load, 2), round(os.getloadavg()[0], 2)
    return result


# -- corpus ---------------------------------------------------------------------------------------
def prepare_corpora(workdir: Path, sizes: list[int], seed: int) -> dict[str, Any]:
    """The largest corpus (reused when already there) and its prefixes."""
    workdir.mkdir(parents=True, exist_ok=True)
    largest = max(sizes)
    full = workdir / f"corpus-s{seed}-{largest}.jsonl"
    meta = full.with_suffix(".meta.json")
    if meta.exists() and full.exists() and truth_path(full).exists():
        info = json.loads(meta.read_text())
    else:
        info = write_corpus(full, largest, seed)
        meta.write_text(json.dumps(info))
    info["reused"] = meta.stat().st_mtime < time.time() - 60
    for n in sizes:
        path = corpus_path(workdir, seed, n)
        if n != largest and not (path.exists() and truth_path(path).exists()):
            with open(full, "rb") as src, open(path, "wb") as dst:
                for _ in range(n):
                    dst.write(src.readline())
            truth = np.load(truth_path(full))
            np.savez(truth_path(path), family=truth["family"][:n], kinds=truth["kinds"][:n])
    info["bytes_per_doc"] = round(full.stat().st_size / largest)
    return info


def corpus_path(workdir: Path, seed: int, n: int) -> Path:
    """The corpus file of ``n`` documents."""
    return workdir / f"corpus-s{seed}-{n}.jsonl"


# -- runs -----------------------------------------------------------------------------------------
def run_engine(workdir: Path, seed: int, n: int) -> dict[str, Any]:
    corpus = corpus_path(workdir, seed, n)
    state = workdir / f"state-{n}"
    shutil.rmtree(state, ignore_errors=True)
    result = spawn("_engine", str(corpus), str(state), str(workdir / f"events-{n}.jsonl"))
    labels = workdir / f"labels-{n}.npy"
    sizes = spawn("_state", str(state), str(labels), str(n))
    sizes.pop("peak_rss_mb")
    result["state"] = sizes
    result["state_bytes_per_doc_after_run"] = round(sizes["after_run_bytes"] / n)
    result["state_bytes_per_doc_compacted"] = round(sizes["compacted_bytes"] / n)
    truth = np.load(truth_path(corpus))
    result["quality"] = quality(np.load(labels), truth["family"].astype(np.int64), truth["kinds"])
    shutil.rmtree(state, ignore_errors=True)
    (workdir / f"events-{n}.jsonl").unlink(missing_ok=True)
    return result


def run_datasketch(workdir: Path, seed: int, n: int) -> dict[str, Any]:
    corpus = corpus_path(workdir, seed, n)
    pairs = workdir / f"pairs-{n}.npy"
    result = spawn("_datasketch", str(corpus), str(pairs))
    truth = np.load(truth_path(corpus))
    labels = components(np.load(pairs), n)
    result["quality"] = quality(labels, truth["family"].astype(np.int64), truth["kinds"])
    return result


def plot(report: dict[str, Any], png: Path) -> None:
    """docs/s, CPU per document and peak RSS against N; repeated runs as hollow markers."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(15, 4.4))
    styles = {
        "engine": ("stream-dedupe (RocksDB state)", "tab:blue"),
        "datasketch": ("datasketch (in memory)", "tab:orange"),
    }
    for name, (label, color) in styles.items():
        seen: set[int] = set()
        first, again = [], []
        for r in (r for r in report["runs"] if r["engine"] == name):
            (again if r["docs"] in seen else first).append(r)
            seen.add(r["docs"])
        if not first:
            continue
        xs = [r["docs"] for r in first]
        ax1.plot(xs, [r["docs_per_s"] for r in first], "o-", color=color, label=label)
        for r in first + again:
            ax1.annotate(
                f"load {r['load_before']:.1f}",
                (r["docs"], r["docs_per_s"]),
                fontsize=7,
                color=color,
                textcoords="offset points",
                xytext=(4, 4),
            )
        if again:
            ax1.plot(
                [r["docs"] for r in again],
                [r["docs_per_s"] for r in again],
                "o",
                mfc="none",
                color=color,
                label=f"{label}, repeated",
            )
        ax2.plot(xs, [r["cpu_us_per_doc_all"] for r in first], "o-", color=color, label=f"{label}, all threads")
        if name == "engine":
            ax2.plot(xs, [r["cpu_us_per_doc_main"] for r in first], "s--", color=color, label=f"{label}, engine thread")
        ax3.plot(xs, [r["peak_rss_mb"] for r in first], "o-", color=color, label=label)
    ax1.set(xscale="log", xlabel="documents (N)", ylabel="documents/s", title="Throughput (wall clock)")
    ax2.set(xscale="log", xlabel="documents (N)", ylabel="CPU µs per document", title="CPU per document")
    ax3.set(xscale="log", yscale="log", xlabel="documents (N)", ylabel="peak RSS (MB)", title="Peak memory")
    ax1.set_ylim(bottom=0)
    ax2.set_ylim(bottom=0)
    ax3.axhline(1536, color="grey", linestyle=":", label="1.5 GB target")
    for ax in (ax1, ax2, ax3):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    corpus = report["corpus"]
    fig.suptitle(f"Cost at scale: ~{corpus['bytes_per_doc']} B JSON per document, 30% near-duplicates, 2 shared cores")
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "_plot":  # redraw from a saved report
        report = json.loads(Path(sys.argv[2]).read_text())
        plot(report, Path(sys.argv[3]))
        return
    if len(sys.argv) > 1 and sys.argv[1] in CHILDREN:
        func: Any = CHILDREN[sys.argv[1]]
        args = sys.argv[2:]
        print(json.dumps(func(*args[:2], int(args[2])) if sys.argv[1] == "_state" else func(*args)))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--engines", default="engine,datasketch")
    parser.add_argument("--datasketch-max", type=int, default=None, help="largest N for datasketch (default: all)")
    parser.add_argument("--repeat-pair", action="store_true", help="run the engine at the smallest/largest N again")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/sd-bench-scale"), help="corpora (kept), states")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "out" / "scale.json")
    parser.add_argument("--png", type=Path, default=REPO / "bench" / "out" / "scale.png")
    parser.add_argument(
        "--docs-png", default=str(REPO / "docs" / "img" / "scale.png"), help="copy of the PNG ('': none)"
    )
    args = parser.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    engines = args.engines.split(",")
    report: dict[str, Any] = {"cpus": os.cpu_count(), "python": sys.version.split()[0], "sizes": sizes, "runs": []}
    report["corpus"] = prepare_corpora(args.workdir, sizes, args.seed)
    report["corpus"]["jaccard_to_base"] = jaccard_sample(corpus_path(args.workdir, args.seed, sizes[0]), args.seed)
    print(json.dumps(report["corpus"]), flush=True)
    plan = [(n, e) for n in sizes for e in engines if e == "engine" or n <= (args.datasketch_max or n)]
    if args.repeat_pair:
        plan += [(sizes[0], "engine"), (sizes[-1], "engine")]
    for n, name in plan:
        result = (run_engine if name == "engine" else run_datasketch)(args.workdir, args.seed, n)
        result["engine"] = name
        report["runs"].append(result)
        keys = (
            "engine",
            "docs",
            "docs_per_s",
            "peak_rss_mb",
            "load_before",
            "cpu_us_per_doc_main",
            "cpu_us_per_doc_all",
        )
        brief = {k: result.get(k) for k in keys}
        brief.update({k: v for k, v in result.items() if k.startswith("state_bytes")})
        brief.update({k: result["quality"][k] for k in ("recall", "precision")})
        print(json.dumps(brief), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    plot(report, args.png)
    if args.docs_png:
        Path(args.docs_png).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(args.png, args.docs_png)


if __name__ == "__main__":
    main()
