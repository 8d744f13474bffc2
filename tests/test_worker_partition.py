"""Kafka's default partition of a batch of keys equals aiokafka's, key by key (worker/partition.py)."""

from __future__ import annotations

import random

from aiokafka.partitioner import DefaultPartitioner, murmur2  # type: ignore[import-untyped]

from stream_dedupe.worker.partition import default_partitions, murmur2_many


def test_murmur2_of_every_length_and_random_bytes_equals_aiokafkas() -> None:
    rng = random.Random(7)
    keys = [bytes(rng.randrange(256) for _ in range(length)) for length in range(71) for _ in range(5)]
    keys += [b"doc%07d" % i for i in range(2000)] + ["ß-ünïcode-id-€".encode()] + [b"\xff" * 9, b"\x00" * 7]
    rng.shuffle(keys)
    assert murmur2_many(keys).tolist() == [murmur2(key) for key in keys]


def test_partitions_equal_the_default_partitioner_and_none_keys_get_one() -> None:
    keys: list[bytes | None] = [b"doc%05d" % i for i in range(500)] + [
        b"https://wiki/page/" + b"x" * i for i in range(40)
    ]
    keys.insert(17, None)
    for partitions in ([0], [0, 1, 2, 3], list(range(7))):
        chosen = default_partitions(keys, partitions)
        expected = [DefaultPartitioner()(key, partitions, partitions) for key in keys if key is not None]
        assert [p for p, key in zip(chosen, keys, strict=True) if key is not None] == expected
        assert chosen[17] in partitions
    assert default_partitions([], [0, 1]) == []
