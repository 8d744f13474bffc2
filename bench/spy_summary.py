"""Summarize a py-spy ``--format raw`` profile: the functions where samples end, and inclusive shares.

python bench/spy_summary.py bench/out/spy-1.txt [--top 25]
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

_FRAME = re.compile(r"(\S+) \((.*?)(:\d+)?\)$")


def _name(frame: str) -> str:
    match = _FRAME.match(frame)
    return f"{match.group(1)} ({'/'.join(match.group(2).split('/')[-2:])})" if match else frame


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile", type=Path)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    total, leaves, inclusive = 0, Counter[str](), Counter[str]()
    for line in args.profile.read_text().splitlines():
        if not line.strip():
            continue
        stack, count = line.rsplit(" ", 1)
        n = int(count)
        total += n
        frames = [_name(f) for f in stack.split(";")]
        leaves[frames[-1]] += n
        for name in set(frames):
            inclusive[name] += n
    print(f"{total} samples\n\nwhere samples end:")
    for name, n in leaves.most_common(args.top):
        print(f"{100 * n / total:5.1f}%  {name}")
    print("\ninclusive:")
    for name, n in inclusive.most_common(args.top + 20):
        print(f"{100 * n / total:5.1f}%  {name}")


if __name__ == "__main__":
    main()
