"""The records between the decider (the gather) and the index shards on Kafka.

A call is one message, possibly cut into parts that each fit a Kafka record: the decider writes
calls to ``<app>-shard-requests`` (partition = shard), each shard answers reads on
``<app>-shard-replies`` (one partition, read by the decider). A part's value is a fixed header
(call id, part, parts, shard, method) and a slice of the payload; a record key is the call id.
Payloads are fixed binary layouts (no pickle: the topics are a network boundary).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence

import numpy as np

from stream_dedupe.errors import StateError

_HEADER = struct.Struct("<QHHHB")  # call id, part, parts, shard, method
#: Payload bytes per record part (a record stays well under Kafka's default 1 MB limit).
PART_BYTES = 512 << 10

CONFIGURE, APPLY, MEMBERS, GET_MANY, COUNT, ERROR = 1, 2, 3, 4, 5, 6
METHODS = {CONFIGURE: "configure", APPLY: "apply", MEMBERS: "members", GET_MANY: "get_many", COUNT: "count"}


def parts_of(call: int, shard: int, method: int, payload: bytes) -> list[tuple[bytes, bytes]]:
    """``(key, value)`` records of one call."""
    chunks = [payload[i : i + PART_BYTES] for i in range(0, len(payload), PART_BYTES)] or [b""]
    key = struct.pack("<Q", call)
    return [(key, _HEADER.pack(call, i, len(chunks), shard, method) + c) for i, c in enumerate(chunks)]


class Assembler:
    """Joins the parts of calls as they arrive; yields ``(call, shard, method, payload)`` when whole."""

    def __init__(self) -> None:
        self._open: dict[tuple[int, int], list[bytes | None]] = {}

    def add(self, value: bytes) -> tuple[int, int, int, bytes] | None:
        """Take one record value; the whole call once its last part arrived, else None."""
        call, part, parts, shard, method = _HEADER.unpack_from(value, 0)
        body = value[_HEADER.size :]
        if parts == 1:
            return call, shard, method, body
        slots = self._open.setdefault((call, shard), [None] * parts)
        slots[part] = body
        if any(s is None for s in slots):
            return None
        del self._open[(call, shard)]
        return call, shard, method, b"".join(s for s in slots if s is not None)

    def forget(self, call: int) -> None:
        """Drop the parts of a call nobody waits for any more."""
        for key in [k for k in self._open if k[0] == call]:
            del self._open[key]


def pack_strings(items: Sequence[bytes]) -> bytes:
    """Length-prefixed byte strings (None as -1)."""
    out = [struct.pack("<I", len(items))]
    for item in items:
        out.append(struct.pack("<i", len(item)))
        out.append(item)
    return b"".join(out)


def pack_optional(items: Sequence[bytes | None]) -> bytes:
    """Length-prefixed byte strings, None as length -1."""
    out = [struct.pack("<I", len(items))]
    for item in items:
        if item is None:
            out.append(struct.pack("<i", -1))
        else:
            out.append(struct.pack("<i", len(item)))
            out.append(item)
    return b"".join(out)


def unpack_optional(raw: bytes, pos: int = 0) -> tuple[list[bytes | None], int]:
    """Inverse of :func:`pack_optional` (also reads :func:`pack_strings`); the values and the end position."""
    (count,) = struct.unpack_from("<I", raw, pos)
    pos += 4
    out: list[bytes | None] = []
    for _ in range(count):
        (size,) = struct.unpack_from("<i", raw, pos)
        pos += 4
        if size < 0:
            out.append(None)
        else:
            out.append(raw[pos : pos + size])
            pos += size
    return out, pos


def pack_buckets(bands: np.ndarray, keys: np.ndarray) -> bytes:
    """A members call: bucket band numbers and keys."""
    return struct.pack("<I", bands.shape[0]) + bands.astype("<u2").tobytes() + keys.astype("<u4").tobytes()


def unpack_buckets(raw: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Inverse of :func:`pack_buckets`."""
    (n,) = struct.unpack_from("<I", raw, 0)
    bands = np.frombuffer(raw, dtype="<u2", count=n, offset=4).astype(np.int32)
    keys = np.frombuffer(raw, dtype="<u4", count=n, offset=4 + 2 * n).astype(np.uint32)
    return bands, keys


def pack_members(idx: np.ndarray, ids: Sequence[str]) -> bytes:
    """A members answer: bucket index of each member, and the member ids."""
    return struct.pack("<I", idx.shape[0]) + idx.astype("<u4").tobytes() + pack_strings([i.encode() for i in ids])


def unpack_members(raw: bytes) -> tuple[np.ndarray, list[str]]:
    """Inverse of :func:`pack_members`."""
    (n,) = struct.unpack_from("<I", raw, 0)
    idx = np.frombuffer(raw, dtype="<u4", count=n, offset=4).astype(np.int32)
    ids, _ = unpack_optional(raw, 4 + 4 * n)
    return idx, [i.decode() for i in ids if i is not None]


def unpack_call(raw: bytes) -> Iterator[bytes | None]:
    """The optional byte strings of a payload made by :func:`pack_optional`."""
    values, end = unpack_optional(raw)
    if end != len(raw):
        raise StateError(f"a shard call has {len(raw) - end} trailing bytes: it is damaged")
    yield from values
