"""datatrove's MinhashDedup over a JSONL corpus: the four stages, one task each (run by bench_peers.py).

Runs in datatrove's own virtualenv (its dependencies are not the project's): standard library and
datatrove only. Writes a JSON list of the ids datatrove removes as duplicates.

    DATATROVE_VENV/bin/python bench/peer_datatrove.py corpus.jsonl removed.json
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path


def main() -> None:
    from datatrove.executor.local import LocalPipelineExecutor
    from datatrove.pipeline.dedup.minhash import (
        MinhashConfig,
        MinhashDedupBuckets,
        MinhashDedupCluster,
        MinhashDedupFilter,
        MinhashDedupSignature,
    )
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.writers import JsonlWriter

    corpus, out = Path(sys.argv[1]), Path(sys.argv[2])
    # word 3-grams like the others; datatrove's own normalization and its 14 buckets x 8 hashes
    config = MinhashConfig(n_grams=3)
    with tempfile.TemporaryDirectory(prefix="sd-datatrove-") as tmp:
        work = Path(tmp)

        def reader() -> JsonlReader:
            return JsonlReader(str(corpus.parent), glob_pattern=corpus.name, text_key="text", id_key="id")

        stages = [
            ([reader(), MinhashDedupSignature(output_folder=str(work / "sigs"), config=config)], 1),
            (
                [
                    MinhashDedupBuckets(
                        input_folder=str(work / "sigs"), output_folder=str(work / "buckets"), config=config
                    )
                ],
                config.num_buckets,
            ),
            (
                [
                    MinhashDedupCluster(
                        input_folder=str(work / "buckets"), output_folder=str(work / "remove"), config=config
                    )
                ],
                1,
            ),
            (
                [
                    reader(),
                    MinhashDedupFilter(
                        input_folder=str(work / "remove"),
                        exclusion_writer=JsonlWriter(str(work / "removed"), compression=None),
                    ),
                    JsonlWriter(str(work / "kept"), compression=None),
                ],
                1,
            ),
        ]
        for number, (pipeline, tasks) in enumerate(stages):
            LocalPipelineExecutor(
                pipeline=pipeline, tasks=tasks, workers=1, logging_dir=str(work / f"logs{number}")
            ).run()
        removed = [
            json.loads(line)["id"]
            for f in sorted((work / "removed").rglob("*.jsonl"))
            for line in f.read_text().splitlines()
            if line
        ]
    out.write_text(json.dumps(removed))


if __name__ == "__main__":
    main()
