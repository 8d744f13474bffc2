"""Resident memory of one worker deciding N documents, then restoring them after a lost disk.

    python bench/bench_memory.py --docs 1000000 --rocksdb-memory-mb 256   # own broker on 19594/19595

The scale corpus of ``bench/corpus.py`` (seeded) is produced to 4 input partitions; one worker
(``--rocksdb-memory-mb`` = its RocksDB budget) decides every record while its RSS (``VmRSS`` of
/proc, sampled every second) is recorded, then SIGTERM; its state directory is deleted and the
same worker restores the state from the changelogs (RSS sampled again until ``/readyz``). Prints
one JSON object (also bench/out/memory.json): peak RSS of each phase and the RSS after each
100k documents, against the chart's 2 GiB memory limit.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
import bench_restore  # noqa: E402
from bench_restore import kafka, metric, wait_restored  # noqa: E402
from bench_scale import corpus_path, prepare_corpora  # noqa: E402
from bench_worker import CLI, Worker  # noqa: E402

CHART_LIMIT_BYTES = 2 << 30


class RssSampler:
    """Samples a process's VmRSS every ``interval`` seconds in a thread; ``peak`` in bytes."""

    def __init__(self, pid: int, interval: float = 1.0) -> None:
        self.pid, self.interval, self.peak, self.last = pid, interval, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        self.last = int(line.split()[1]) * 1024
                        self.peak = max(self.peak, self.last)
            except OSError:
                return
            self._stop.wait(self.interval)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(5)
        return self.peak


def mb(n: int) -> float:
    return round(n / (1 << 20), 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=100000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--port", type=int, default=19594)
    parser.add_argument("--rocksdb-memory-mb", type=int, default=256)
    parser.add_argument(
        "--session-timeout", type=float, default=6.0, help="worker's; raise it on a loaded machine (the gauge scans)"
    )
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/sd-bench-scale"), help="corpora (shared)")
    parser.add_argument("--timeout", type=float, default=3600.0)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "out" / "memory.json")
    args = parser.parse_args()
    bench_restore.RUN_DIR = Path(f"/tmp/sd-bench-memory-{args.port}")
    result: dict[str, Any] = {
        "docs": args.docs,
        "rocksdb_memory_mb": args.rocksdb_memory_mb,
        "chart_limit_mb": mb(CHART_LIMIT_BYTES),
        "load_start": round(os.getloadavg()[0], 2),
    }
    prepare_corpora(args.workdir, [args.docs], args.seed)
    corpus = corpus_path(args.workdir, args.seed, args.docs)
    tmp = args.workdir / "memory"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    prefix = f"mem{uuid.uuid4().hex[:6]}"
    flags = ["--batch-wait", "0.05", "--rocksdb-memory-mb", str(args.rocksdb_memory_mb)]
    flags += ["--session-timeout", str(args.session_timeout), "--heartbeat-interval", str(args.session_timeout / 20)]
    with kafka(args.port) as bootstrap:
        worker = Worker(bootstrap, prefix, tmp, flags, name="memory")
        sampler = RssSampler(worker.proc.pid)
        worker.wait_ready()
        result["rss_ready_mb"] = mb(sampler.last)
        produce = [sys.executable, "-c", CLI, "produce", str(corpus), "--broker", bootstrap]
        produce += ["--topic", f"{prefix}.in", "--partitions", "4", "--no-progress"]
        producer = subprocess.Popen(produce, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        t0, step, by_docs = time.monotonic(), max(args.docs // 10, 1), {}
        while time.monotonic() - t0 < args.timeout:
            if worker.proc.poll() is not None:
                raise SystemExit(f"worker exited: {worker.log.read_text()[-3000:]}")
            try:
                decided = metric(worker.metrics(), "stream_dedupe_documents_total")
            except OSError:
                decided = 0
            while decided >= step * (len(by_docs) + 1) and len(by_docs) < 10:
                by_docs[step * (len(by_docs) + 1)] = mb(sampler.last)
            if decided >= args.docs:
                break
            time.sleep(1)
        result["decide_s"] = round(time.monotonic() - t0, 1)
        producer.wait(60)
        time.sleep(10)  # the last flushes and compactions
        result["rss_after_decide_mb"] = mb(sampler.last)
        result["rss_by_documents_mb"] = by_docs
        worker.stop()
        result["peak_rss_decide_mb"] = mb(sampler.stop())
        shutil.rmtree(tmp / "memory-state")
        worker = Worker(bootstrap, prefix, tmp, flags, name="memory")
        sampler = RssSampler(worker.proc.pid)
        try:
            result["restore"] = wait_restored(worker, args.timeout)
            time.sleep(5)
            result["rss_after_restore_mb"] = mb(sampler.last)
        finally:
            worker.stop()
        result["peak_rss_restore_mb"] = mb(sampler.stop())
    peak = max(result["peak_rss_decide_mb"], result["peak_rss_restore_mb"])
    result["margin_to_chart_limit_mb"] = round(mb(CHART_LIMIT_BYTES) - peak, 1)
    shutil.rmtree(tmp, ignore_errors=True)
    text = json.dumps(result, indent=2)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
