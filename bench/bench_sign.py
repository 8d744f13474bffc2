"""CPU per document of signing alone (normalize, shingle, MinHash, exact shingle sets), numba on.

    python bench/bench_sign.py --docs 20000 --passes 3
    python bench/bench_sign.py --docs 20000 --passes 3 --checkout /tmp/base   # another tree, for A/B

``bench/synth.py`` documents in batches of 500, one warm-up batch first (loads the kernels), then
``--passes`` passes over all of them; prints the CPU per document of each pass (``time.process_time``,
steadier than wall time on a shared machine). ``--checkout DIR`` runs the same in a child process
with ``DIR`` (a ``git archive`` of ``stream_dedupe``) first on ``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=20000)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--checkout", type=Path, help="a tree holding stream_dedupe/ to measure instead")
    args = parser.parse_args()
    if args.checkout is not None:
        env = {**os.environ, "PYTHONPATH": f"{args.checkout}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        command = [sys.executable, __file__, "--docs", str(args.docs), "--passes", str(args.passes)]
        raise SystemExit(subprocess.run(command, env=env, cwd="/", check=False).returncode)
    sys.path.insert(0, str(BENCH))
    from synth import generate

    import stream_dedupe
    from stream_dedupe.config import DedupeParams
    from stream_dedupe.core import jit
    from stream_dedupe.core.signer import Signer

    jit.enable()
    texts = [d["text"] for d in generate(args.docs, 1)]
    signer = Signer(DedupeParams())
    signer.sign(texts[:500])
    rates = []
    for _ in range(args.passes):
        started = time.process_time()
        for i in range(0, len(texts), 500):
            signer.sign(texts[i : i + 500])
        rates.append((time.process_time() - started) / len(texts) * 1e6)
    print(f"{Path(stream_dedupe.__file__).parent.parent}: sign us of CPU per document: {[round(r, 1) for r in rates]}")


if __name__ == "__main__":
    main()
