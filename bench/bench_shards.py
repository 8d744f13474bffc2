"""Per-shard footprint and speed of ``dedupe --index-shards S`` (issue 17's evidence, on one machine).

Each shard count runs in a fresh process over the same corpus (``bench/corpus.py``), with a new
RocksDB state: the engine over :func:`stream_dedupe.sharded_state.open_state`, batches of 512.
At the end, before closing, it records per shard: documents in its band tables, band-table bytes,
disk bytes and the shard process's RSS; and for the gather (the deciding process): its peak RSS,
its own disk bytes, and the band-table bytes it holds (0 when sharded). S = 1 is the unsharded
layout (one process). CPU is the deciding process plus its shard processes, before the final compaction; RSS is
measured before it too, and disk bytes after it.

    python bench/bench_shards.py --corpus /tmp/scale100k.jsonl --shards 1,2,4
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run_one(corpus: Path, shards: int, state: Path) -> dict[str, object]:
    """Dedupe ``corpus`` into a new ``state`` with ``shards`` index shards; the measurements."""
    from stream_dedupe.config import DedupeParams, RuntimeLimits
    from stream_dedupe.core import jit
    from stream_dedupe.core.engine import DedupeEngine
    from stream_dedupe.core.records import parse_document
    from stream_dedupe.core.sharding.gather import ShardedStore
    from stream_dedupe.sharded_state import ProcessShards, open_state
    from stream_dedupe.storage.rocks import RocksStore

    jit.enable()
    start, cpu = time.perf_counter(), time.process_time()
    store = open_state(state, shards)
    engine = DedupeEngine(DedupeParams(), store, RuntimeLimits())
    docs = 0
    with corpus.open("rb") as lines:
        batch = []
        for line in lines:
            batch.append(parse_document(line.rstrip(b"\n"), 1 << 20))
            if len(batch) == 512:
                engine.process(batch)
                engine.commit()
                docs += len(batch)
                batch = []
        if batch:
            engine.process(batch)
            engine.commit()
            docs += len(batch)
    wall = time.perf_counter() - start
    out: dict[str, object] = {
        "shards": shards,
        "docs": docs,
        "wall_s": round(wall, 2),
        "docs_per_s": round(docs / wall),
    }
    out["gather_rss_bytes"] = _rss()
    out["gather_peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    out["gather_cpu_s"] = round(time.process_time() - cpu, 2)
    if isinstance(store, ShardedStore):
        client = store.client
        assert isinstance(client, ProcessShards)
        out["per_shard"] = client.stats(compact=True)
        local = store.local
        out["gather_band_table_bytes"] = 0
    else:
        local = store
        out["gather_band_table_bytes"] = int(engine.lsh.tables._keys.nbytes + engine.lsh.tables._vals.nbytes)
    assert isinstance(local, RocksStore)
    local.compact()  # the settled size (the shards' outbox and write-ahead files gone)
    # the gather's own files: its directory's top level (the shards' stores are under shards/)
    out["gather_disk_bytes"] = sum(f.stat().st_size for f in state.iterdir() if f.is_file())
    out["gather_namespace_bytes"] = local.namespace_bytes()
    store.close()
    shard_cpu = sum(float(p["cpu_s"]) for p in out.get("per_shard", []))  # type: ignore[attr-defined]
    out["cpu_s"] = round(float(out["gather_cpu_s"]) + shard_cpu, 2)  # type: ignore[arg-type]
    return out


def _rss() -> int:
    import os

    return os.sysconf("SC_PAGE_SIZE") * int(Path("/proc/self/statm").read_text().split()[1])


def main() -> None:
    """Run every shard count in a fresh process; print one JSON line each and a table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--shards", default="1,2,4")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--state", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(run_one(args.corpus, args.one, args.state)))
        return
    rows = []
    for shards in (int(s) for s in args.shards.split(",")):
        tmp = Path(tempfile.mkdtemp(prefix="sd-shards-"))
        try:
            cmd = [
                sys.executable,
                __file__,
                "--corpus",
                str(args.corpus),
                "--one",
                str(shards),
                "--state",
                str(tmp / "s"),
            ]
            line = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        print(line, flush=True)
        rows.append(json.loads(line))
    mb = 1 << 20
    head = "| S | docs/s | CPU s (all) | gather: peak RSS MB | disk MB | per shard: documents | band tables MB"
    print(f"\n{head} | disk MB | RSS MB | CPU s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        alone = {"documents": row["docs"], "band_table_bytes": row["gather_band_table_bytes"]}
        parts = row.get("per_shard") or [{**alone, "disk_bytes": 0, "rss_bytes": 0, "cpu_s": 0}]
        cells = [
            "/".join(str(p["documents"]) for p in parts),
            "/".join(f"{p['band_table_bytes'] / mb:.0f}" for p in parts),
            "/".join(f"{p['disk_bytes'] / mb:.0f}" for p in parts),
            "/".join(f"{p['rss_bytes'] / mb:.0f}" for p in parts),
            "/".join(f"{p['cpu_s']}" for p in parts),
        ]
        print(
            f"| {row['shards']} | {row['docs_per_s']:,} | {row['cpu_s']} | {row['gather_peak_rss_bytes'] / mb:.0f} "
            f"| {row['gather_disk_bytes'] / mb:.0f} | " + " | ".join(cells) + " |"
        )


if __name__ == "__main__":
    main()
