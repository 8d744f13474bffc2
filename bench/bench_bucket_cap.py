"""What a small LSH bucket cap costs in decisions: representatives kept, against the same stream with no cap.

Each corpus is six clusters of near copies (5-120 copies of a 60-200 word page, up to three
words changed and a random number appended), shuffled, decided in batches of 37 on an in-memory
engine at each cap and at an unreachable one. A cap smaller than the clusters fills their
buckets; ``representatives`` should stay near the uncapped count (:mod:`stream_dedupe.core.hidden_pairs`),
``extra`` are kept with the cap and not without it, ``missing`` the other way round.
``--dated`` gives every copy a random ``updated_at`` (the newest ranks first). Run from another
tree with ``PYTHONPATH=DIR``.

    .venv/bin/python bench/bench_bucket_cap.py --seeds 0-3 --caps 4,10,30
"""

from __future__ import annotations

import argparse
import random

import orjson

from stream_dedupe.config import DedupeParams, RuntimeLimits
from stream_dedupe.core.engine import DedupeEngine
from stream_dedupe.core.records import Record, parse_document
from stream_dedupe.exports import iter_representative_ids
from stream_dedupe.storage.memory import MemoryStore

UNCAPPED = 1_000_000


def corpus(seed: int, dated: bool) -> list[Record]:
    """Six shuffled clusters of near copies (see the module docstring)."""
    rng = random.Random(seed)
    vocabulary = [f"w{i}" for i in range(3000)]
    docs = []
    for cluster in range(6):
        page = [rng.choice(vocabulary) for _ in range(rng.randint(60, 200))]
        for i in range(rng.randint(5, 120)):
            words = list(page)
            for _ in range(rng.randint(0, 3)):
                words[rng.randrange(len(words))] = rng.choice(vocabulary)
            words.append(f"n{rng.randint(0, 10 ** rng.randint(1, 5))}")
            item: dict[str, str] = {"id": f"c{cluster}-{i}", "text": " ".join(words)}
            if dated:
                item["updated_at"] = f"2026-01-{rng.randint(1, 28):02d}T00:00:00Z"
            docs.append(item)
    rng.shuffle(docs)
    return [parse_document(orjson.dumps(d), 1 << 20) for d in docs]


def representatives(records: list[Record], cap: int) -> set[str]:
    """The representatives after deciding ``records`` in batches of 37 with this bucket cap."""
    store = MemoryStore()
    engine = DedupeEngine(DedupeParams(), store, RuntimeLimits(max_bucket_size=cap))
    for at in range(0, len(records), 37):
        engine.process(records[at : at + 37])
        engine.commit()
    return set(iter_representative_ids(store))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0-3", help="a range FIRST-LAST of corpus seeds")
    parser.add_argument("--caps", default="4,10,30", help="comma-separated --max-bucket-size values")
    args = parser.parse_args()
    first, last = (int(x) for x in args.seeds.split("-"))
    caps = [int(c) for c in args.caps.split(",")]
    print("| seed | updated_at | documents | cap | representatives | uncapped | extra | missing |")
    print("|---|---|---|---|---|---|---|---|", flush=True)
    totals = {cap: [0, 0] for cap in caps}
    for seed in range(first, last + 1):
        for dated in (False, True):
            records = corpus(seed, dated)
            roomy = representatives(records, UNCAPPED)
            for cap in caps:
                kept = representatives(records, cap)
                totals[cap][0] += len(kept)
                totals[cap][1] += len(roomy)
                row = (seed, "yes" if dated else "no", len(records), cap, len(kept), len(roomy))
                print("| " + " | ".join(map(str, row)) + f" | {len(kept - roomy)} | {len(roomy - kept)} |", flush=True)
    for cap, (kept_all, roomy_all) in totals.items():
        print(f"cap {cap}: {kept_all} representatives against {roomy_all} uncapped ({kept_all / roomy_all - 1:+.1%})")


if __name__ == "__main__":
    main()
