"""Where the gather keeps its outbox (the last commit's changes for the shards) in its state.

The outbox is written with the gather's part of every commit, atomically, and replayed to the
shards after a crash (:mod:`~stream_dedupe.core.sharding.gather`). A batch's changes can be
megabytes (a shingle set and a signature a new document), more than one changelog record may
hold (a Kafka topic's ``max.message.bytes``, 1 MB by default): a value that does not fit would be
kept only on the worker's disk, and a lost disk would lose the commit. So an outbox larger than
:data:`OUTBOX_PART_BYTES` is cut into parts under keys of their own, all in the same write: the
first under :data:`OUTBOX_KEY` (an outbox that fits is stored exactly as before), their count
under :data:`OUTBOX_PARTS_KEY`. A later, smaller outbox deletes the parts it no longer uses.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping, Sequence

from stream_dedupe.errors import StateError

#: The gather's meta key of its last commit's changes for the shards (its first part).
OUTBOX_KEY = b"shard-outbox"
#: The gather's meta key of the number of parts of a cut outbox (absent: one part).
OUTBOX_PARTS_KEY = b"shard-outbox-parts"
#: Bytes of outbox under one key: a quarter of Kafka's default ``max.message.bytes``.
OUTBOX_PART_BYTES = 256 * 1024


def part_key(index: int) -> bytes:
    """The meta key of part ``index`` (>= 1) of a cut outbox."""
    return b"shard-outbox#%d" % index


def is_outbox_key(key: bytes) -> bool:
    """True for every meta key the outbox uses (copies of a state skip them)."""
    return key in (OUTBOX_KEY, OUTBOX_PARTS_KEY) or key.startswith(b"shard-outbox#")


def parts_of(blob: bytes, part_bytes: int = OUTBOX_PART_BYTES) -> int:
    """How many parts :func:`outbox_writes` stores ``blob`` in (an empty blob: one)."""
    return max(1, -(-len(blob) // part_bytes))


def outbox_writes(blob: bytes, stored_parts: int, part_bytes: int = OUTBOX_PART_BYTES) -> dict[bytes, bytes | None]:
    """The meta writes that store ``blob`` as the outbox, replacing one of ``stored_parts`` parts."""
    chunks = [blob[i * part_bytes : (i + 1) * part_bytes] for i in range(parts_of(blob, part_bytes))]
    writes: dict[bytes, bytes | None] = {OUTBOX_KEY: chunks[0]}
    if len(chunks) > 1 or stored_parts > 1:
        writes[OUTBOX_PARTS_KEY] = struct.pack("<I", len(chunks)) if len(chunks) > 1 else None
    for i in range(1, max(len(chunks), stored_parts)):
        writes[part_key(i)] = chunks[i] if i < len(chunks) else None
    return writes


def read_outbox(get: Callable[[Sequence[bytes]], Sequence[bytes | None]]) -> tuple[bytes | None, int]:
    """The stored outbox (None if there is none) and its number of parts.

    Args:
        get: Reads meta values by key, in order (a ``KVStore.get_many`` on ``meta``).

    Raises:
        StateError: if a part is missing.

    """
    head, count = get([OUTBOX_KEY, OUTBOX_PARTS_KEY])
    if head is None:
        return None, 0
    parts = struct.unpack("<I", count)[0] if count is not None else 1
    rest = list(get([part_key(i) for i in range(1, parts)])) if parts > 1 else []
    missing = [i + 1 for i, value in enumerate(rest) if value is None]
    if missing:
        raise StateError(
            f"the gather's shard outbox lacks parts {missing} of {parts}: the state is damaged; "
            "restore it from its changelogs"
        )
    return head + b"".join(v for v in rest if v is not None), parts


def read_outbox_from(meta: Mapping[bytes, bytes]) -> bytes | None:
    """The outbox in a mapping of the gather's meta entries (None if there is none)."""
    return read_outbox(lambda keys: [meta.get(k) for k in keys])[0]
