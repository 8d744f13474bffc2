"""A batch's :class:`~stream_dedupe.core.boilerplate.TextLines` in a few flat arrays, to cross a process boundary.

``dedupe --jobs`` computes the boilerplate line keys of a batch in a signing process (they
depend on the texts only). Pickled as they are (a list of line ends and a list of 8-byte keys a
text) they cost the deciding process more to unpickle than it saves: ~50 objects a document, each
decoded on its own. Packed, they are five arrays a batch, and the deciding process rebuilds the
lists with three numpy calls, as :func:`~stream_dedupe.core.boilerplate.text_lines` does from
the kernel's output (``tests/test_linepack.py`` holds the round trip to the lists it packed).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain
from typing import NamedTuple

import numpy as np

from stream_dedupe.core.boilerplate import TextLines

_NO_KEY = bytes(8)


class PackedLines(NamedTuple):
    """The lines of a batch's texts, flat: per text its line count and ``words``, per line its end and key."""

    counts: np.ndarray  # int64, lines of each text
    words: np.ndarray  # bool, TextLines.words of each text
    ends: np.ndarray  # int64, each line's end in its text
    counted: np.ndarray  # bool, whether a line has a key
    keys: bytes  # 8 bytes a line: its key, zeros where it has none


def pack_lines(lines: Sequence[TextLines]) -> PackedLines:
    """Flatten ``lines`` (every key 8 bytes or None, as :func:`~stream_dedupe.core.boilerplate.line_key` makes them)."""
    keys = list(chain.from_iterable(t.keys for t in lines))
    return PackedLines(
        np.fromiter((len(t.ends) for t in lines), dtype=np.int64, count=len(lines)),
        np.fromiter((t.words for t in lines), dtype=bool, count=len(lines)),
        np.fromiter(chain.from_iterable(t.ends for t in lines), dtype=np.int64, count=len(keys)),
        np.fromiter((k is not None for k in keys), dtype=bool, count=len(keys)),
        b"".join(_NO_KEY if k is None else k for k in keys),
    )


def unpack_lines(packed: PackedLines) -> list[TextLines]:
    """The :class:`TextLines` that :func:`pack_lines` flattened, equal to them."""
    objects = np.frombuffer(packed.keys, dtype="V8", count=packed.counted.shape[0]).astype(object)
    objects[~packed.counted] = None
    keys: list[bytes | None] = objects.tolist()
    ends: list[int] = packed.ends.tolist()
    spans: list[int] = [0, *np.cumsum(packed.counts).tolist()]
    return [
        TextLines(ends[first:last], keys[first:last], words)
        for first, last, words in zip(spans[:-1], spans[1:], packed.words.tolist(), strict=True)
    ]
