"""A worker that lost its disk: time to rebuild N documents of state from the changelogs.

    python bench/bench_restore.py --docs 100000           # starts its own broker on 19592/19593
    python bench/bench_restore.py --docs 50000 --tree /tmp/base   # the worker of another checkout

1. A broker of ``tools/kafka/kafka.sh`` (ports 19592/19593, run dir /tmp/sd-bench-restore), the
   scale corpus of ``bench/corpus.py`` (reused from ``bench/bench_scale.py``'s work directory);
2. ``stream-dedupe produce`` the corpus into the input topic, one worker decides every record
   (its ``stream_dedupe_documents_total`` reaches N), then SIGTERM;
3. the worker's state directory is deleted and the same worker started again: time from the
   process start to ``/readyz`` = 200 with ``stream_dedupe_state_documents`` reporting the
   restored documents, and when Faust reported the tables recovered (``recovered`` in /readyz).

Prints one JSON object (also bench/out/restore.json). Worker start-up and metrics come from
``bench/bench_worker.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from bench_scale import corpus_path, prepare_corpora  # noqa: E402
from bench_worker import CLI, Worker  # noqa: E402

RUN_DIR = Path("/tmp/sd-bench-restore")


@contextmanager
def kafka(port: int) -> Iterator[str]:
    """A fresh broker of tools/kafka/kafka.sh on ``port`` (controller ``port + 1``), stopped at exit."""
    env = {**os.environ, "KAFKA_PORT": str(port), "KAFKA_CONTROLLER_PORT": str(port + 1), "KAFKA_RUN_DIR": str(RUN_DIR)}
    kafka_sh = ["bash", str(REPO / "tools" / "kafka" / "kafka.sh")]
    started = subprocess.run([*kafka_sh, "restart"], env=env, capture_output=True, text=True, check=False)
    if started.returncode != 0:
        raise SystemExit(f"kafka.sh restart failed: {started.stderr}")
    try:
        yield started.stdout.strip().splitlines()[-1]
    finally:
        subprocess.run([*kafka_sh, "stop"], env=env, capture_output=True, check=False)


def metric(text: str, name: str) -> float:
    """Sum of every sample of metric ``name`` (all label sets)."""
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name) and (line[len(name)] in " {")
    )


def dir_bytes(path: Path) -> int:
    """Bytes allocated on disk (as du counts them: Kafka's preallocated index files are sparse)."""
    return sum(f.stat().st_blocks * 512 for f in path.rglob("*") if f.is_file()) if path.exists() else 0


def wait_decided(worker: Worker, docs: int, timeout: float) -> float:
    """Seconds until the worker has decided ``docs`` records."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if worker.proc.poll() is not None:
            raise SystemExit(f"worker exited: {worker.log.read_text()[-3000:]}")
        try:
            if metric(worker.metrics(), "stream_dedupe_documents_total") >= docs:
                return time.monotonic() - t0
        except OSError:
            pass
        time.sleep(1)
    raise SystemExit(f"the worker did not decide {docs} records in {timeout:.0f} s (log: {worker.log})")


def wait_restored(worker: Worker, timeout: float) -> dict[str, Any]:
    """Time from the process start to tables recovered and to ready with the state's documents."""
    out: dict[str, Any] = {}
    while time.monotonic() - worker.started < timeout:
        if worker.proc.poll() is not None:
            raise SystemExit(f"worker exited: {worker.log.read_text()[-3000:]}")
        try:
            body = worker.readyz()
        except OSError:
            time.sleep(0.2)
            continue
        now = time.monotonic() - worker.started
        if body.get("recovered") and "recovered_s" not in out:
            out["recovered_s"] = round(now, 1)
        if body.get("ready"):
            documents = metric(worker.metrics(), "stream_dedupe_state_documents")
            if documents > 0:
                out.update(ready_s=round(now, 1), state_documents=int(documents))
                return out
        time.sleep(0.2)
    raise SystemExit(f"the worker was not ready after {timeout:.0f} s (log: {worker.log})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=100000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--port", type=int, default=19592)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/sd-bench-scale"), help="corpora (shared)")
    parser.add_argument("--timeout", type=float, default=3600.0)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "out" / "restore.json")
    parser.add_argument("--tree", help="run the worker of this checkout (e.g. a git worktree of an earlier commit)")
    args = parser.parse_args()
    tree = str(Path(args.tree).resolve()) if args.tree else None
    result: dict[str, Any] = {"docs": args.docs, "cpus": os.cpu_count(), "load_start": round(os.getloadavg()[0], 2)}
    prepare_corpora(args.workdir, [args.docs], args.seed)
    corpus = corpus_path(args.workdir, args.seed, args.docs)
    tmp = args.workdir / "restore"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    prefix = f"rs{uuid.uuid4().hex[:6]}"
    with kafka(args.port) as bootstrap:
        worker = Worker(bootstrap, prefix, tmp, ["--batch-wait", "0.05"], name="restore", tree=tree)
        result["first_start_ready_s"] = round(worker.wait_ready(), 1)
        t0 = time.monotonic()
        produce = [sys.executable, "-c", CLI, "produce", str(corpus), "--broker", bootstrap]
        produce += ["--topic", f"{prefix}.in", "--partitions", "4", "--no-progress"]
        subprocess.run(produce, check=True, capture_output=True)
        result["produce_s"] = round(time.monotonic() - t0, 1)
        result["decided_s"] = round(wait_decided(worker, args.docs, args.timeout) + result["produce_s"], 1)
        result["decide_docs_per_s"] = round(args.docs / result["decided_s"])
        worker.stop()
        state = tmp / "restore-state"
        result["state_dir_bytes"] = dir_bytes(state)
        result["broker_dir_bytes"] = dir_bytes(RUN_DIR)
        result["meta_changelog_bytes"] = sum(
            dir_bytes(d) for d in RUN_DIR.glob(f"data/{prefix}-app-state-meta-changelog-*")
        )
        shutil.rmtree(state)
        result["load_before_restore"] = round(os.getloadavg()[0], 2)
        worker = Worker(bootstrap, prefix, tmp, ["--batch-wait", "0.05"], name="restore", tree=tree)
        try:
            result["restore"] = wait_restored(worker, args.timeout)
        finally:
            worker.stop()
        result["restore"]["state_dir_bytes"] = dir_bytes(state)
        result["restore"]["docs_per_s"] = round(args.docs / result["restore"]["ready_s"])
        logged = re.search(r"engine ready: (\d+) documents in state.*ready after ([\d.]+)s", worker.log.read_text())
        if logged:
            result["restore"]["logged_documents"] = int(logged[1])
            result["restore"]["logged_ready_s"] = float(logged[2])
    shutil.rmtree(tmp, ignore_errors=True)
    text = json.dumps(result, indent=2)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
