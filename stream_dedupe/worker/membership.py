"""The decider's lease on its role: it decides only while the broker has recently confirmed it is a member.

In ``at_least_once`` nothing fences a decider the group has replaced: a worker frozen past its
session timeout (a long pause, a stalled VM, SIGSTOP) is put out of the group, another worker
takes the index partition and decides on, and the frozen one, thawed, used to go on where it
stopped with its out-of-date engine before its heartbeat found it out. It published events
under ``seq`` numbers the new decider had used, decided records a second time, and wrote an
older index position into the changelog (``tests/integration/test_worker_frozen.py``).

So the decider holds a lease: the later of its last assignment and the sending of the last
heartbeat the broker accepted (:func:`~stream_dedupe.worker.faust_compat.track_membership`).
The broker cannot have put it out of the group within a session timeout of that moment, so the
decide stage publishes and commits a batch only within :func:`lease_seconds` of it
(``session_timeout - heartbeat_interval``; :func:`ensure_member`, before each of the two steps),
and the gate opens again only once a heartbeat or a new assignment renews it. A decider whose
partition came back after another worker decided (the restored state's index position is not
its own) rebuilds its engine from the state first (:func:`replaced`). ``exactly_once`` fences
the outputs of a replaced decider by its transactions as well; in neither guarantee are the
state's changelogs fenced, so a freeze that falls during a batch's changelog write can still
land those records late (docs/worker.md, "A decider frozen past its session timeout").
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from stream_dedupe.worker.pipeline import Runtime


log = logging.getLogger("stream_dedupe.worker")


class MembershipUnconfirmed(TimeoutError):
    """The broker has not confirmed this worker's membership lately: another worker may decide now (retried)."""


def lease_age(rt: Runtime) -> float:
    """Seconds since the broker last confirmed this worker's membership (see the module docstring)."""
    confirmed = rt.confirmed_at() if rt.confirmed_at is not None else None
    if confirmed is None:
        return 0.0  # not tracked (no group consumer found): never held back for it
    return float(time.monotonic() - max(rt.assigned_at, confirmed))


def lease_seconds(session_timeout: float, heartbeat_interval: float) -> float:
    """How long a confirmation holds: ``session_timeout - heartbeat_interval``, and above one heartbeat's wait.

    A heartbeat every ``heartbeat_interval`` renews the lease, so it must outlast that interval
    (the settings allow a heartbeat interval up to the session timeout): at least halfway between.
    """
    return max(session_timeout - heartbeat_interval, (session_timeout + heartbeat_interval) / 2)


def membership_fresh(rt: Runtime) -> bool:
    """True while the broker cannot have put this worker out of its group."""
    s = rt.settings
    return lease_age(rt) < lease_seconds(s.session_timeout, s.heartbeat_interval)


def not_member(rt: Runtime) -> bool:
    """True (and logged) when the decider's lease has run out: it must not decide until it is renewed."""
    if membership_fresh(rt):
        return False
    log.warning(
        "the broker last confirmed this worker's group membership %.1f s ago (session timeout %g s): not deciding "
        "until the group confirms it again (another worker may decide meanwhile)",
        lease_age(rt),
        rt.settings.session_timeout,
    )
    return True


def ensure_member(rt: Runtime, step: str) -> None:
    """Close the decide gate and raise :class:`MembershipUnconfirmed` unless :func:`membership_fresh`.

    Args:
        rt: The worker's :class:`~stream_dedupe.worker.pipeline.Runtime`.
        step: What was about to happen (for the message).

    """
    if not membership_fresh(rt):
        rt.gate.clear()  # the decide loop keeps the batch; steer() reopens the gate once renewed
        raise MembershipUnconfirmed(
            f"not {step}: the broker last confirmed this worker's group membership {lease_age(rt):.1f} s ago (session "
            f"timeout {rt.settings.session_timeout:g} s): another worker may decide now; waiting for the group"
        )


def replaced(rt: Runtime, position_key: bytes) -> bool:
    """True if the state's decided index position (at ``position_key``) is not the engine's.

    Then another decider wrote since this one's last batch (the partition came back to it).
    """
    (stored,) = rt.store.get_many("meta", [position_key])
    return stored is not None and int(stored) != rt.index_offset
