"""End-to-end throughput and decision latency of one Kafka worker, beside the embedded engine.

    python bench/bench_worker.py --docs 20000            # starts its own broker (tools/kafka/kafka.sh)
    python bench/bench_worker.py --bootstrap 127.0.0.1:9092
    python bench/bench_worker.py --docs 20000 --jobs 1,2 --rounds 2   # worker --jobs, interleaved
    python bench/bench_worker.py --docs 20000 --index-shards 1,2      # worker --index-shards
    python bench/bench_worker.py --tree before=/tmp/base --tree after=. --rounds 2   # two checkouts, interleaved

1. embedded: the engine over a RocksDB state on the same documents (process + commit, batches of 500);
2. throughput: a ready worker; produce N documents (~1.7 KB, bench/synth.py) while a consumer
   reads the events topic; docs/s = N / (first produce -> last document event consumed);
3. latency: a fresh worker of a new app (new topics); documents produced at a paced rate
   (default 1,000/s); per document, the time from its send to the consumer receiving its event
   (p50/p99; ``steady_p50_ms`` and ``steady_p99_ms`` leave out the documents sent in the first
   2 s, the start), plus the p99 bucket of the worker's own
   ``stream_dedupe_decision_latency_seconds`` histogram;
4. restart latency: that worker stopped and started again on its state directory (a pod
   restarted with its volume: the app's topics exist and have had traffic), then the same paced
   load with new document ids. A new app's first second is slower than a restart's (BENCHMARKS.md,
   "The first second of a new app"): the two are reported apart.

Prints one JSON object (also written to bench/out/worker.json). ``SD_BENCH_KEEP_LOGS=DIR`` keeps
the workers' logs in DIR (they are otherwise deleted with the temporary directory).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
# The benchmarks run one local broker: one replica per topic (the worker's default is 3).
os.environ.setdefault("STREAM_DEDUPE_REPLICATION_FACTOR", "1")

from stream_dedupe.config import DedupeParams  # noqa: E402
from stream_dedupe.core.engine import DedupeEngine  # noqa: E402
from stream_dedupe.core.records import parse_document  # noqa: E402
from stream_dedupe.inputs import read_lines  # noqa: E402
from stream_dedupe.storage.rocks import RocksStore  # noqa: E402
from stream_dedupe.worker.topics import prepare_input_topic  # noqa: E402

CLI = """
from stream_dedupe.cli import app, main
from stream_dedupe.worker.cli import worker
from stream_dedupe.worker.produce_cli import produce
if "worker" not in {c.name or getattr(c.callback, "__name__", None) for c in app.registered_commands}:
    app.command()(worker); app.command()(produce)
main()
"""
DOC_EVENTS = {b'"new"', b'"duplicate-of"', b'"unchanged"', b'"invalid"', b'"deleted"'}


def synth_docs(n: int, seed: int) -> list[bytes]:
    spec = importlib.util.spec_from_file_location("synth", REPO / "bench" / "synth.py")
    assert spec and spec.loader
    synth = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(synth)
    return [orjson.dumps(d) for d in synth.generate(n, seed)]


def corpus_docs(path: Path, limit: int | None = None) -> list[bytes]:
    """The non-blank lines of a JSONL corpus (read as ``dedupe`` reads its inputs), the first ``limit`` of them."""
    docs = [item.raw for item in read_lines(str(path)) if item.raw.strip()]
    return docs if limit is None else docs[:limit]


def renamed(raw: bytes, prefix: str) -> bytes:
    """A synthetic document under a new id (``prefix`` + its id): new to a state that has the original."""
    doc = orjson.loads(raw)
    doc["id"] = prefix + doc["id"]
    return orjson.dumps(doc)


def embedded(docs: list[bytes], tmp: Path) -> dict[str, Any]:
    store = RocksStore(tmp / "embedded-state")
    engine = DedupeEngine(DedupeParams(), store)
    t0 = time.perf_counter()
    for i in range(0, len(docs), 500):
        engine.process([parse_document(d, 1 << 20) for d in docs[i : i + 500]])
        engine.commit()
    seconds = time.perf_counter() - t0
    store.close()
    return {"docs_per_s": round(len(docs) / seconds), "seconds": round(seconds, 2)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Worker:
    """A worker process of app ``prefix``; ``name`` tells apart several workers of one app.

    ``name`` also names its state directory, so a worker started again under the same name is a
    restart on its volume; ``log_suffix`` gives that start a log file of its own.
    """

    def __init__(
        self,
        bootstrap: str,
        prefix: str,
        tmp: Path,
        extra: list[str],
        name: str = "",
        log_suffix: str = "",
        tree: str | None = None,
    ) -> None:
        self.port = free_port()
        self.prefix = prefix
        self.name = name or prefix
        self.log = tmp / f"{self.name}{log_suffix}.log"
        args = [
            *("worker", "--broker", bootstrap, "--app-id", f"{prefix}-app", "--input-topic", f"{prefix}.in"),
            *("--events-topic", f"{prefix}.events", "--deduped-topic", f"{prefix}.deduped"),
            *("--dlq-topic", f"{prefix}.dlq", "--state-dir", str(tmp / f"{self.name}-state")),
            *("--web-port", str(self.port), "--input-partitions", "4", "--log-level", "warning", *extra),
        ]
        with open(self.log, "wb") as out:
            # tree: another checkout's stream_dedupe (e.g. a git worktree of an earlier commit)
            env = {**os.environ, "PYTHONPATH": tree} if tree else None
            self.proc = subprocess.Popen([sys.executable, "-c", CLI, *args], stdout=out, stderr=out, env=env, cwd=tree)
        self.started = time.monotonic()

    def wait_ready(self) -> float:
        while time.monotonic() - self.started < 120:
            if self.proc.poll() is not None:
                raise SystemExit(f"worker exited: {self.log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=1) as r:
                    if r.status == 200:
                        return time.monotonic() - self.started
            except OSError:
                pass
            time.sleep(0.1)
        raise SystemExit("worker not ready after 120 s")

    def readyz(self) -> dict[str, Any]:
        """The /readyz body (``ready``, ``role``...), whatever the status code."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=1) as r:
                return dict(orjson.loads(r.read()))
        except urllib.error.HTTPError as exc:
            return dict(orjson.loads(exc.read()))
        except OSError:  # not answering (yet): not ready
            return {"ready": False, "role": None}

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
            return str(r.read().decode())

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(40)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        keep = os.environ.get("SD_BENCH_KEEP_LOGS")  # a directory to keep the workers' logs in
        if keep:
            Path(keep).mkdir(parents=True, exist_ok=True)
            (Path(keep) / self.log.name).write_bytes(self.log.read_bytes())


#: Latencies of documents sent this long after the first one are also reported on their own
#: (``steady_p50_ms``/``steady_p99_ms``): a fresh worker's first second is its own story.
STEADY_AFTER_S = 2.0


async def produce_and_consume(
    bootstrap: str, prefix: str, docs: list[bytes], rate: float | None, kinds: set[bytes] | None = None
) -> dict[str, Any]:
    """Produce ``docs`` (paced at ``rate``/s, or as fast as possible) while consuming the events.

    ``kinds``: count only document events of these kinds (``{b'"unchanged"'}`` for a second pass
    of the same documents). Events written before the call (an earlier pass of the same ids on
    the same topics) are skipped by their timestamps.
    """
    counted = DOC_EVENTS if kinds is None else kinds
    since_ms = int(time.time() * 1000)
    await prepare_input_topic(bootstrap, f"{prefix}.in", 4)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=2 if rate else 10, max_batch_size=1 << 20)
    consumer = AIOKafkaConsumer(
        f"{prefix}.events",
        bootstrap_servers=bootstrap,
        group_id=None,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=5,
    )
    await producer.start()
    await consumer.start()
    sent_at: dict[str, float] = {}
    latencies: list[float] = []
    settled: list[float] = []  # the documents sent after the first STEADY_AFTER_S seconds

    async def consume() -> float:
        seen: set[bytes] = set()
        while len(seen) < len(docs):
            batch = await consumer.getmany(timeout_ms=100, max_records=10000)
            now = time.monotonic()
            for records in batch.values():
                for r in records:
                    head = r.value[:40]
                    if r.timestamp >= since_ms and any(k in head for k in counted):
                        origin = dict(r.headers).get("sd-origin", b"")
                        if origin in seen:
                            continue
                        doc_id = orjson.loads(r.value)["id"]
                        if doc_id in sent_at:  # not an event of an earlier run on the same topics
                            seen.add(origin)
                            latencies.append(now - sent_at[doc_id])
                            if sent_at[doc_id] - t0 >= STEADY_AFTER_S:
                                settled.append(now - sent_at[doc_id])
        return time.monotonic()

    task = asyncio.create_task(consume())
    t0 = time.monotonic()
    futures = []
    for i, raw in enumerate(docs):
        if rate:
            delay = t0 + i / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
        doc_id = orjson.loads(raw)["id"]
        sent_at[doc_id] = time.monotonic()
        futures.append(await producer.send(f"{prefix}.in", raw, key=doc_id.encode()))
    await asyncio.gather(*futures)
    produced = time.monotonic()
    t1 = await asyncio.wait_for(task, 600)
    await producer.stop()
    await consumer.stop()
    latencies.sort()
    out = {
        "docs": len(docs),
        "seconds": round(t1 - t0, 2),
        "docs_per_s": round(len(docs) / (t1 - t0)),
        "produce_seconds": round(produced - t0, 2),
    }
    if rate:
        out["p50_ms"] = round(1000 * latencies[len(latencies) // 2], 1)
        out["p99_ms"] = round(1000 * latencies[int(len(latencies) * 0.99)], 1)
        out["max_ms"] = round(1000 * latencies[-1], 1)
        if settled:  # the worker's first seconds (connections, first batches) left out
            settled.sort()
            out["steady_p50_ms"] = round(1000 * settled[len(settled) // 2], 1)
            out["steady_p99_ms"] = round(1000 * settled[int(len(settled) * 0.99)], 1)
    return out


def histogram_p99(metrics: str) -> float | None:
    buckets = []
    for line in metrics.splitlines():
        if line.startswith("stream_dedupe_decision_latency_seconds_bucket"):
            le = line.split('le="')[1].split('"')[0]
            buckets.append((float("inf") if le == "+Inf" else float(le), float(line.rsplit(" ", 1)[1])))
    if not buckets or buckets[-1][1] == 0:
        return None
    total = buckets[-1][1]
    for le, count in buckets:
        if count >= 0.99 * total:
            return le
    return None


@contextmanager
def broker(bootstrap: str | None, port: int = 19392) -> Iterator[str]:
    """``bootstrap`` if given, else a broker of tools/kafka/kafka.sh on ``port`` (stopped at exit)."""
    if bootstrap is not None:
        yield bootstrap
        return
    env = {
        **os.environ,
        "KAFKA_PORT": str(port),
        "KAFKA_CONTROLLER_PORT": str(port + 1),
        "KAFKA_RUN_DIR": f"/tmp/stream-dedupe-kafka-bench-{port}",
    }
    kafka_sh = ["bash", str(REPO / "tools" / "kafka" / "kafka.sh")]
    started = subprocess.run([*kafka_sh, "start"], env=env, capture_output=True, text=True, check=False)
    if started.returncode != 0:
        raise SystemExit(started.stderr)
    try:
        yield started.stdout.strip()
    finally:
        subprocess.run([*kafka_sh, "stop"], env=env, capture_output=True, check=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=20000)
    parser.add_argument("--latency-docs", type=int, default=15000)
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--bootstrap", default=None, help="use this broker instead of starting one")
    parser.add_argument("--batch-wait", default="0.05")
    parser.add_argument(
        "--jobs", default="", help="comma-separated worker --jobs values to compare, e.g. 1,2 (default: the worker's)"
    )
    parser.add_argument(
        "--index-shards", default="", help="comma-separated worker --index-shards values to compare, e.g. 1,2"
    )
    parser.add_argument("--rounds", type=int, default=1, help="interleaved rounds of the variants")
    parser.add_argument(
        "--tree", action="append", default=[], help='"NAME=PATH": a variant running that checkout\'s worker, repeatable'
    )
    args = parser.parse_args()
    result: dict[str, Any] = {"cpus": os.cpu_count(), "docs": args.docs}
    variants = [("jobs", v) for v in args.jobs.split(",") if v]
    variants += [("index-shards", v) for v in args.index_shards.split(",") if v]
    variants += [("tree", v) for v in args.tree]
    variants = variants or [("", "")]
    with broker(args.bootstrap) as bootstrap, tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        docs = synth_docs(args.docs, seed=1)
        result["avg_doc_bytes"] = round(sum(map(len, docs)) / len(docs))
        result["embedded"] = embedded(docs, tmp)
        for round_no in range(args.rounds):
            for flag, value in variants:  # interleaved: the machine's noise hits every variant alike
                tree = str(Path(value.split("=", 1)[1]).resolve()) if flag == "tree" else None
                extra = ["--batch-wait", args.batch_wait, *([f"--{flag}", value] if flag and not tree else [])]
                key = f"{flag.replace('-', '_')}={value}" if flag else "default"
                runs = result.setdefault("runs", {}).setdefault(key, [])
                w = Worker(bootstrap, f"bw{uuid.uuid4().hex[:6]}", tmp, extra, tree=tree)
                run: dict[str, Any] = {"round": round_no, "worker_ready_s": round(w.wait_ready(), 2)}
                run["worker"] = asyncio.run(produce_and_consume(bootstrap, w.prefix, docs, None))
                w.stop()
                run["ratio_worker_vs_embedded"] = round(
                    run["worker"]["docs_per_s"] / result["embedded"]["docs_per_s"], 3
                )
                w = Worker(bootstrap, f"bl{uuid.uuid4().hex[:6]}", tmp, extra, tree=tree)
                w.wait_ready()
                paced = synth_docs(args.latency_docs, seed=2)
                run["latency"] = asyncio.run(produce_and_consume(bootstrap, w.prefix, paced, args.rate))
                run["latency"]["rate"] = args.rate
                run["latency"]["worker_histogram_p99_le_s"] = histogram_p99(w.metrics())
                w.stop()
                w = Worker(bootstrap, w.prefix, tmp, extra, log_suffix="-restart", tree=tree)  # the same app and state
                w.wait_ready()
                again = [renamed(raw, "restart-") for raw in synth_docs(args.latency_docs, seed=3)]
                run["restart_latency"] = asyncio.run(produce_and_consume(bootstrap, w.prefix, again, args.rate))
                run["restart_latency"]["rate"] = args.rate
                w.stop()
                runs.append(run)
                print(key, json.dumps(run), file=sys.stderr, flush=True)  # progress; stdout is the JSON
        first = next(iter(result["runs"].values()))[0]
        keys = ("worker_ready_s", "worker", "ratio_worker_vs_embedded", "latency", "restart_latency")
        result.update({k: first[k] for k in keys})
    write_result("worker.json", result)


def write_result(name: str, result: dict[str, Any]) -> None:
    """Print ``result`` as JSON and write it to bench/out/``name``."""
    text = json.dumps(result, indent=2)
    print(text)
    out = REPO / "bench" / "out"
    out.mkdir(exist_ok=True)
    (out / name).write_text(text + "\n")


if __name__ == "__main__":
    main()
