"""CPU a document of a retention sweep's scan: read every ``docs`` record, decode it, apply a policy.

The worker's sweep (``stream_dedupe/worker/retention.py``) does this over its Faust table every
``--expire-interval``; here the same loop runs over a ``dedupe`` state's RocksDB store:

    python -m stream_dedupe dedupe CORPUS.jsonl --state /tmp/st --events /tmp/st.ev --no-progress
    python bench/bench_retention_scan.py --state /tmp/st --rounds 5
"""

from __future__ import annotations

import argparse
import statistics
import time

from stream_dedupe.core.retention import RetentionPolicy, expired_entries
from stream_dedupe.storage.rocks import RocksStore


def scan_once(store: RocksStore, policy: RetentionPolicy, now_us: int) -> tuple[int, int, float]:
    """(documents, expired, CPU seconds) of one scan."""
    started = time.process_time()
    docs = list(store.items("docs"))
    expired = sum(1 for _ in expired_entries(docs, policy, now_us))
    return len(docs), expired, time.process_time() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state", required=True, help="a dedupe state directory")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--max-age", default="news=7d,=30d", help="the policy, as --max-age takes it")
    args = parser.parse_args()
    store = RocksStore(args.state)
    policy = RetentionPolicy.parse([rule.strip() for rule in args.max_age.split(",")])
    now_us = int(time.time() * 1_000_000)
    per_doc = []
    try:
        for _ in range(args.rounds):
            n, expired, cpu = scan_once(store, policy, now_us)
            per_doc.append(cpu / max(n, 1) * 1e6)
            print(f"{n:,} documents, {expired:,} expired: {per_doc[-1]:.2f} us a document")
    finally:
        store.close()
    print(f"median {statistics.median(per_doc):.2f} us a document")


if __name__ == "__main__":
    main()
