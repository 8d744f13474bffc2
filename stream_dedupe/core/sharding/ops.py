"""What one commit of the gather changes in one shard, and its byte form.

A commit of the gather (:class:`~stream_dedupe.core.sharding.gather.ShardedStore`) sends each
shard one :class:`ShardOps`: the final values of the shard's keys of the sharded namespaces
(``sigs``, ``sets``), and the band-table changes in the order the engine made them (a re-crawl
leaves its old buckets before it joins its new ones). The byte form is a small fixed layout, not
pickle: it is kept in the gather's state (the outbox a restart replays) and can cross a network.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import numpy as np

from stream_dedupe.errors import StateError

_MAGIC = b"SDS1"


@dataclass
class BandOp:
    """A document joins (``index``) or leaves buckets: band numbers and the high 32 bits of the band hashes."""

    index: bool
    doc_id: str
    bands: np.ndarray  # int32
    keys: np.ndarray  # uint32


@dataclass
class ShardOps:
    """One commit's changes to one shard."""

    kv: dict[str, dict[bytes, bytes | None]] = field(default_factory=dict)
    bands: list[BandOp] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.bands) or any(self.kv.values())

    def encode(self) -> bytes:
        """The byte form (see the module docstring)."""
        out = [_MAGIC, struct.pack("<I", len(self.kv))]
        for namespace, writes in self.kv.items():
            name = namespace.encode("ascii")
            out.append(struct.pack("<BI", len(name), len(writes)))
            out.append(name)
            for key, value in writes.items():
                out.append(struct.pack("<Ii", len(key), -1 if value is None else len(value)))
                out.append(key)
                if value is not None:
                    out.append(value)
        out.append(struct.pack("<I", len(self.bands)))
        for op in self.bands:
            doc = op.doc_id.encode("utf-8")
            out.append(struct.pack("<BIH", op.index, len(doc), op.bands.shape[0]))
            out.append(doc)
            out.append(op.bands.astype("<u2").tobytes())
            out.append(op.keys.astype("<u4").tobytes())
        return b"".join(out)

    @classmethod
    def decode(cls, raw: bytes) -> ShardOps:
        """Read the byte form of :meth:`encode`.

        Raises:
            StateError: if ``raw`` is not one (another format, truncated, or damaged).

        """
        try:
            return cls._decode(raw)
        except (struct.error, ValueError, UnicodeDecodeError, IndexError) as exc:
            raise StateError(f"a shard change set is truncated or damaged ({exc}): the state or topic is") from exc

    @classmethod
    def _decode(cls, raw: bytes) -> ShardOps:
        if raw[:4] != _MAGIC:
            raise StateError("not a shard change set (bad magic): the state or topic holds something else")
        view = memoryview(raw)
        pos = 4
        (namespaces,) = struct.unpack_from("<I", view, pos)
        pos += 4
        kv: dict[str, dict[bytes, bytes | None]] = {}
        for _ in range(namespaces):
            size, count = struct.unpack_from("<BI", view, pos)
            pos += 5
            name = bytes(view[pos : pos + size]).decode("ascii")
            pos += size
            writes: dict[bytes, bytes | None] = {}
            for _ in range(count):
                key_len, value_len = struct.unpack_from("<Ii", view, pos)
                pos += 8
                key = bytes(view[pos : pos + key_len])
                pos += key_len
                if value_len < 0:
                    writes[key] = None
                else:
                    writes[key] = bytes(view[pos : pos + value_len])
                    pos += value_len
            kv[name] = writes
        (count,) = struct.unpack_from("<I", view, pos)
        pos += 4
        ops = []
        for _ in range(count):
            index, doc_len, n = struct.unpack_from("<BIH", view, pos)
            pos += 7
            doc_id = bytes(view[pos : pos + doc_len]).decode("utf-8")
            pos += doc_len
            bands = np.frombuffer(view[pos : pos + 2 * n], dtype="<u2").astype(np.int32)
            pos += 2 * n
            keys = np.frombuffer(view[pos : pos + 4 * n], dtype="<u4").astype(np.uint32)
            pos += 4 * n
            ops.append(BandOp(bool(index), doc_id, bands, keys))
        if pos != len(raw):
            raise StateError(f"a shard change set does not end where its contents do ({pos} of {len(raw)} bytes)")
        return cls(kv, ops)


def encode_all(number: int, ops: list[ShardOps]) -> bytes:
    """One commit's changes to every shard (the gather's outbox), with the commit number."""
    parts = [struct.pack("<QI", number, len(ops))]
    for shard_ops in ops:
        raw = shard_ops.encode()
        parts.append(struct.pack("<Q", len(raw)))
        parts.append(raw)
    return b"".join(parts)


def decode_all(raw: bytes) -> tuple[int, list[ShardOps]]:
    """Read :func:`encode_all`'s form: ``(commit number, changes per shard)``.

    Raises:
        StateError: if ``raw`` is truncated or damaged.

    """
    try:
        return _decode_all(raw)
    except struct.error as exc:
        raise StateError(f"the gather's shard outbox is truncated or damaged ({exc}): the state is damaged") from exc


def _decode_all(raw: bytes) -> tuple[int, list[ShardOps]]:
    number, count = struct.unpack_from("<QI", raw, 0)
    pos = 12
    ops: list[ShardOps] = []
    for _ in range(count):
        (size,) = struct.unpack_from("<Q", raw, pos)
        pos += 8
        if pos + size > len(raw):
            raise StateError(f"the gather's shard outbox is truncated ({len(raw)} bytes, shard {len(ops)} needs more)")
        ops.append(ShardOps.decode(raw[pos : pos + size]))
        pos += size
    if pos != len(raw):
        raise StateError(f"the gather's shard outbox does not end where its contents do ({pos} of {len(raw)} bytes)")
    return number, ops
