"""Scale-out of the worker: 1 vs 2 workers end to end, and failover time after kill -9.

    python bench/bench_scale_out.py --docs 20000 --failover-docs 100000
    python bench/bench_scale_out.py --skip-throughput --skip-failover --shard-takeover --shard-docs 40000

1. throughput: the same N documents (~1.7 KB, bench/synth.py) through an app of 1 worker and an
   app of 2 workers (4 input partitions each); docs/s = N / (first produce -> last document
   event consumed). Both apps in one run, on one broker (2 cores: the broker competes).
2. failover: an app of 2 workers with ``--standby-replicas`` 0 and then 1; M documents decided;
   the decider is killed (-9) 3 s after the last event (and, with a standby, also after
   ``--standby-settle`` idle seconds: a standby copy lags while the decider writes at full
   speed); time until the other worker is the decider and ready (its ``/readyz``: role
   ``decide``, 200), split into the group noticing the death (session timeout) and the
   takeover (table recovery or standby catch-up, LSH index rebuild).
3. ``--guarantees``: one worker, ``at_least_once`` vs ``exactly_once``, interleaved.
4. ``--shard-takeover``: an app of 2 workers with ``--index-shards 2`` and ``--standby-replicas``
   0 and then 1; M documents decided, the standby copies caught up (lag 0); the worker that does
   not decide is killed (-9); time until the survivor serves both shards
   (``stream_dedupe_shards_served`` 2), and the changelog records Faust's recovery read.

Prints one JSON object (also written to bench/out/scale_out.json).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_worker import Worker, broker, produce_and_consume, synth_docs, write_result


def throughput(
    bootstrap: str, docs: list[bytes], n_workers: int, tmp: Path, extra: list[str] | None = None
) -> dict[str, Any]:
    prefix = f"so{n_workers}{uuid.uuid4().hex[:6]}"
    workers = [Worker(bootstrap, prefix, tmp, extra or [], name=f"{prefix}-w{i}") for i in range(n_workers)]
    try:
        for w in workers:
            w.wait_ready()
        time.sleep(2.0)  # let the group settle (no rebalance during the measurement)
        result = asyncio.run(produce_and_consume(bootstrap, prefix, docs, None))
        forwarded = [_counter(w.metrics(), "stream_dedupe_forwarded_records_total") for w in workers]
        result["forwarded_by_worker"] = forwarded
        return result
    finally:
        for w in workers:
            w.stop()


def _counter(metrics: str, name: str) -> float:
    match = re.search(rf"^{re.escape(name)} (\S+)$", metrics, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


def failover(bootstrap: str, docs: list[bytes], standby: int, tmp: Path, settle: float = 3.0) -> dict[str, Any]:
    prefix = f"fo{standby}{uuid.uuid4().hex[:6]}"
    extra = ["--standby-replicas", str(standby)]
    workers = [Worker(bootstrap, prefix, tmp, extra, name=f"{prefix}-w{i}") for i in range(2)]
    try:
        for w in workers:
            w.wait_ready()
        asyncio.run(produce_and_consume(bootstrap, prefix, docs, None))
        time.sleep(settle)  # idle time after the last event: standbys catch up with the changelogs
        decider = next(w for w in workers if w.readyz().get("role") == "decide")
        other = next(w for w in workers if w is not decider)
        killed = time.monotonic()
        decider.kill9()
        noticed = None
        while time.monotonic() - killed < 600:
            body = other.readyz()
            if noticed is None and (not body.get("ready") or body.get("role") == "decide"):
                noticed = time.monotonic()
            if body.get("role") == "decide" and body.get("ready"):
                break
            time.sleep(0.05)
        else:
            raise SystemExit(f"no takeover after 600 s: {other.log.read_text()[-3000:]}")
        ready = time.monotonic()
        return {
            "docs_in_state": len(docs),
            "standby_replicas": standby,
            "idle_before_kill_s": settle,
            "takeover_s": round(ready - killed, 2),
            "group_noticed_s": round((noticed or ready) - killed, 2),
            "recovery_s": round(ready - (noticed or ready), 2),
        }
    finally:
        for w in workers:
            if w.proc.poll() is None:
                w.stop()


def shard_takeover(bootstrap: str, docs: list[bytes], standby: int, tmp: Path) -> dict[str, Any]:
    """Kill -9 the worker that does not decide (it serves a shard); time until the decider serves both."""
    prefix = f"st{standby}{uuid.uuid4().hex[:6]}"
    extra = ["--index-shards", "2", "--standby-replicas", str(standby), "--shard-timeout", "20"]
    workers = [Worker(bootstrap, prefix, tmp, extra, name=f"{prefix}-w{i}") for i in range(2)]
    try:
        for w in workers:
            w.wait_ready()
        asyncio.run(produce_and_consume(bootstrap, prefix, docs, None))
        decider = next(w for w in workers if w.readyz().get("role") == "decide")
        other = next(w for w in workers if w is not decider)
        if _counter(decider.metrics(), "stream_dedupe_shards_served") != 1:
            raise SystemExit("the shards did not spread over the two workers: run again")
        deadline = time.monotonic() + 120
        while standby and _counter(decider.metrics(), "stream_dedupe_shard_standby_lag_records") != 0:
            if time.monotonic() > deadline:
                raise SystemExit(f"the standby copy did not catch up: {decider.log.read_text()[-3000:]}")
            time.sleep(0.2)
        killed = time.monotonic()
        other.kill9()
        while _counter(decider.metrics(), "stream_dedupe_shards_served") != 2:
            if time.monotonic() - killed > 900:
                raise SystemExit(f"no takeover after 900 s: {decider.log.read_text()[-3000:]}")
            time.sleep(0.1)
        return {
            "docs_in_state": len(docs),
            "standby_replicas": standby,
            "takeover_s": round(time.monotonic() - killed, 2),
        }
    finally:
        for w in workers:
            if w.proc.poll() is None:
                w.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=20000)
    parser.add_argument("--failover-docs", type=int, default=100000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--bootstrap", default=None, help="use this broker instead of starting one")
    parser.add_argument("--skip-failover", action="store_true")
    parser.add_argument("--standby-settle", type=float, default=60.0, help="idle seconds before the last kill")
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--guarantees", action="store_true", help="also 1 worker at_least_once vs exactly_once")
    parser.add_argument("--shard-takeover", action="store_true", help="also a shard's takeover, standby 0 vs 1")
    parser.add_argument("--shard-docs", type=int, default=40000)
    args = parser.parse_args()
    result: dict[str, Any] = {"cpus": os.cpu_count(), "docs": args.docs, "loadavg_start": os.getloadavg()}
    with broker(args.bootstrap, port=19692) as bootstrap, tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        docs = synth_docs(args.docs, seed=1)
        if not args.skip_throughput:
            runs: dict[str, list[dict[str, Any]]] = {"1_worker": [], "2_workers": []}
            for _ in range(args.rounds):  # interleaved rounds: noise hits both alike
                runs["1_worker"].append(throughput(bootstrap, docs, 1, tmp))
                runs["2_workers"].append(throughput(bootstrap, docs, 2, tmp))
            result["throughput"] = runs
            best = {k: max(r["docs_per_s"] for r in v) for k, v in runs.items()}
            result["docs_per_s_best"] = best
            result["ratio_2_over_1"] = round(best["2_workers"] / best["1_worker"], 2)
            print(json.dumps(result, indent=2), flush=True)  # the throughput part, in case failover fails
        if args.guarantees:
            eos = ["--processing-guarantee", "exactly_once"]
            pairs = [(throughput(bootstrap, docs, 1, tmp), throughput(bootstrap, docs, 1, tmp, eos)) for _ in range(2)]
            result["guarantees"] = {
                "at_least_once_docs_per_s": [a["docs_per_s"] for a, _ in pairs],
                "exactly_once_docs_per_s": [e["docs_per_s"] for _, e in pairs],
            }
            print(json.dumps(result["guarantees"]), flush=True)
        if not args.skip_failover:
            many = synth_docs(args.failover_docs, seed=3)
            cases = [(0, 3.0), (1, 3.0), (1, args.standby_settle)]
            result["failover"] = [failover(bootstrap, many, standby, tmp, settle) for standby, settle in cases]
        if args.shard_takeover:
            many = synth_docs(args.shard_docs, seed=4)
            result["shard_takeover"] = [shard_takeover(bootstrap, many, standby, tmp) for standby in (0, 1, 0, 1)]
            print(json.dumps(result["shard_takeover"]), flush=True)
    result["loadavg_end"] = os.getloadavg()
    write_result("scale_out.json", result)


if __name__ == "__main__":
    main()
