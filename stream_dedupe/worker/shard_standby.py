"""Standby copies of the index shards: which worker keeps a copy of which shard, and the copy.

With ``--index-shards S`` and ``--standby-replicas R`` every shard has up to R standby copies,
each on a worker that does not serve it, so a shard that moves (its worker died, or left) is
recovered from a copy that is at most a fetch behind instead of from the whole changelog through
Faust's per-event recovery (docs/sharding.md, "Standby copies").

The placement is read from the consumer group itself (the broker's ``DescribeGroups``: every
member and the partitions of ``<app>-shard-requests`` it holds) and computed the same way on every
worker (:func:`standby_placement`): members in member-id order, the standbys of a shard are the
R members after its owner. A worker therefore keeps about ``R/W`` of the index on disk besides
the ``1/W`` it serves, not the whole index. It is recomputed after every rebalance (the
copies stop when the group rebalances, before Faust's recovery may write the same stores).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from stream_dedupe.worker import faust_compat
from stream_dedupe.worker.follow import Follower
from stream_dedupe.worker.settings import WorkerSettings

log = logging.getLogger("stream_dedupe.worker.shard")


def standby_placement(owners: Mapping[int, str], members: Sequence[str], replicas: int) -> dict[str, tuple[int, ...]]:
    """The shards each member keeps a standby copy of.

    Args:
        owners: The member serving each shard (shards without an owner get no standby).
        members: Every member of the group.
        replicas: Standby copies wanted per shard (capped at ``len(members) - 1``).

    Returns:
        Member id to the sorted shards it follows (every member is a key).

    """
    ring = sorted(set(members))
    placed: dict[str, list[int]] = {m: [] for m in ring}
    copies = min(max(replicas, 0), len(ring) - 1)
    for shard, owner in sorted(owners.items()):
        if owner not in placed:
            continue
        start = ring.index(owner)
        for step in range(1, copies + 1):
            placed[ring[(start + step) % len(ring)]].append(shard)
    return {m: tuple(shards) for m, shards in placed.items()}


async def describe_shard_owners(settings: WorkerSettings) -> tuple[list[str], dict[int, str]] | None:
    """The group's members and the member serving each shard; None while the group rebalances.

    Raises:
        BrokerUnavailableError: if the broker cannot be reached within 10 s.

    """
    from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment  # type: ignore[import-untyped]

    from stream_dedupe.worker.admin import connect_admin

    admin = await connect_admin(settings.bootstrap, 10, settings=settings)
    try:
        responses = await admin.describe_consumer_groups([settings.app_id])
    finally:
        await admin.close()
    groups = [g for r in responses for g in r.groups if g[1] == settings.app_id]
    if not groups or groups[0][0] != 0 or groups[0][2] != "Stable":
        return None
    members: list[str] = []
    owners: dict[int, str] = {}
    for member in groups[0][5]:  # (error, group, state, protocol type, protocol, members, ...)
        member_id, assignment = member[0], member[-1]  # v0-v3 and v4+ differ in the fields between
        members.append(member_id)
        if assignment:
            for topic, partitions in ConsumerProtocolMemberAssignment.decode(assignment).assignment:
                if topic == settings.shard_requests_topic:
                    owners.update((p, member_id) for p in partitions)
    return members, owners


async def place_standbys(app: Any, rt: Any, tables: dict[str, Any]) -> None:
    """Start this worker's standby copy of the shards the group's placement gives it (once a rebalance).

    The copy is stopped by :func:`stop_standbys` at the next rebalance; until then this only
    refreshes the lag gauge. A failed look-up is retried at the next call.
    """
    if rt.shard_standby is None:
        if time.monotonic() - rt.shard_standby_tried < 2.0:
            return  # the steer timer runs every 0.2 s: one look-up at the broker per 2 s at most
        rt.shard_standby_tried = time.monotonic()
        me, epoch = faust_compat.member_id(app), rt.shard_epoch
        try:
            described = await describe_shard_owners(rt.settings) if me else None
        except Exception as exc:  # the broker is briefly away: the next call tries again
            log.warning("standby placement of the index shards not read yet: %s", exc)
            return
        if described is None or rt.shard_epoch != epoch or app.rebalancing:
            return  # a rebalance began during the look-up: the copies may not write now
        members, owners = described
        if me not in members or len(owners) < rt.settings.index_shards:
            return  # the group is moving again: place the copies after it settles
        mine = standby_placement(owners, members, rt.settings.standby_replicas)[me]
        rt.shard_standby = Follower(rt.settings, tables, mine)
        rt.metrics.shard_standbys.set(len(mine))
        log.info("standby copy of index shards %s (%d workers)", list(mine) or "none", len(set(members)))
    follower = rt.shard_standby
    if follower.tables.partitions:
        follower.start()  # a no-op while it runs
    lag = follower.lag()
    rt.metrics.shard_standby_lag.set(-1 if lag is None else lag)


async def stop_standbys(rt: Any) -> None:
    """Stop the standby copy (a rebalance: Faust's recovery and the servers become the only writers)."""
    rt.shard_epoch += 1  # a placement being looked up now is not started
    follower, rt.shard_standby = rt.shard_standby, None  # nobody restarts it while it stops
    if follower is not None:
        await follower.stop()
    rt.metrics.shard_standby_lag.set(-1)
    rt.metrics.shard_standbys.set(0)
