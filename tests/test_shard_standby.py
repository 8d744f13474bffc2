"""The placement of the index shards' standby copies (``worker/shard_standby.py``)."""

from __future__ import annotations

import random
from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from stream_dedupe.worker.shard_standby import standby_placement


@given(
    n_members=st.integers(1, 6),
    shards=st.integers(2, 16),
    replicas=st.integers(0, 4),
    seed=st.integers(0, 1000),
)
def test_every_shard_gets_its_copies_off_its_owner(n_members: int, shards: int, replicas: int, seed: int) -> None:
    rng = random.Random(seed)
    members = [f"faust-{rng.getrandbits(64):016x}" for _ in range(n_members)]
    owners = {s: rng.choice(members) for s in range(shards)}
    placed = standby_placement(owners, members, replicas)
    assert set(placed) == set(members)  # every member gets an answer, possibly no shard
    copies = Counter(s for shards_of in placed.values() for s in shards_of)
    for shard, owner in owners.items():
        assert shard not in placed[owner]  # never a copy beside the served one
        assert copies[shard] == min(replicas, n_members - 1)  # capped by the other members
    for shards_of in placed.values():
        assert list(shards_of) == sorted(set(shards_of))
    # every worker computes it alone: the member order it sees must not matter
    assert standby_placement(owners, list(reversed(members)), replicas) == placed


def test_one_replica_costs_each_worker_one_share_when_the_shards_are_spread() -> None:
    members = ["a", "b", "c", "d"]
    owners = {s: members[s % 4] for s in range(8)}  # two shards a worker
    placed = standby_placement(owners, members, 1)
    assert placed == {"a": (3, 7), "b": (0, 4), "c": (1, 5), "d": (2, 6)}  # the next member's copy


def test_shards_without_an_owner_or_with_an_unknown_owner_get_no_copy() -> None:
    placed = standby_placement({0: "a", 1: "gone"}, ["a", "b"], 1)
    assert placed == {"a": (), "b": (0,)}
    assert standby_placement({0: "a"}, ["a"], 2) == {"a": ()}  # one worker: no other place
