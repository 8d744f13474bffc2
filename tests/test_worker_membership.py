"""The decider's lease (worker/membership.py): it decides only while the broker has lately confirmed it."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

import pytest

from stream_dedupe.storage.memory import MemoryStore
from stream_dedupe.worker.membership import (
    MembershipUnconfirmed,
    ensure_member,
    lease_seconds,
    membership_fresh,
    replaced,
)
from stream_dedupe.worker.poison import is_record_error, is_transient
from stream_dedupe.worker.settings import WorkerSettings


def _runtime(assigned_ago: float, heartbeat_ago: float | None) -> Any:
    now = time.monotonic()
    confirmed = (lambda: 0.0) if heartbeat_ago is None else (lambda: now - heartbeat_ago)
    gate = asyncio.Event()
    gate.set()
    return SimpleNamespace(
        settings=WorkerSettings(session_timeout=6.0, heartbeat_interval=1.0),
        assigned_at=now - assigned_ago,
        confirmed_at=confirmed,
        gate=gate,
        store=MemoryStore(),
        index_offset=41,
    )


def test_the_lease_runs_from_the_later_of_the_assignment_and_the_last_accepted_heartbeat() -> None:
    assert membership_fresh(_runtime(assigned_ago=0.5, heartbeat_ago=None))  # just assigned
    assert membership_fresh(_runtime(assigned_ago=60, heartbeat_ago=0.8))  # beating
    assert not membership_fresh(_runtime(assigned_ago=60, heartbeat_ago=5.5))  # past session - heartbeat
    assert not membership_fresh(_runtime(assigned_ago=17, heartbeat_ago=17))  # thawed after 17 s
    assert not membership_fresh(_runtime(assigned_ago=8, heartbeat_ago=None))  # no heartbeat accepted since
    untracked = _runtime(assigned_ago=600, heartbeat_ago=None)
    untracked.confirmed_at = lambda: None  # no group consumer found to track: never held back
    assert membership_fresh(untracked)


def test_an_expired_lease_closes_the_gate_and_is_waited_out_not_blamed_on_a_record() -> None:
    rt = _runtime(assigned_ago=30, heartbeat_ago=12)
    with pytest.raises(MembershipUnconfirmed, match=r"not publishing a batch: .* 12\.\d s ago \(session timeout 6 s\)"):
        ensure_member(rt, "publishing a batch")
    assert not rt.gate.is_set()  # the decide loop keeps its records until the group confirms it again
    exc = MembershipUnconfirmed("x")
    assert is_transient(exc) and not is_record_error(exc)
    fresh = _runtime(assigned_ago=30, heartbeat_ago=0.2)
    ensure_member(fresh, "publishing a batch")
    assert fresh.gate.is_set()


def test_a_state_position_written_by_another_decider_means_the_engine_is_out_of_date() -> None:
    from stream_dedupe.errors import StateMismatchError

    rt = _runtime(assigned_ago=1, heartbeat_ago=0.5)
    key = b"worker:index-offset"
    assert not replaced(rt, key)  # a new state: nothing stored
    rt.store.write({"meta": {key: b"41"}})
    assert not replaced(rt, key)  # its own last batch
    rt.store.write({"meta": {key: b"977"}})
    assert replaced(rt, key)  # another worker decided up to 977 meanwhile
    assert not is_record_error(StateMismatchError("shards hold commits the gather does not"))  # never dead-lettered


def test_the_lease_outlasts_the_wait_for_the_next_heartbeat() -> None:
    assert lease_seconds(6.0, 1.0) == 5.0  # the defaults: session timeout minus one heartbeat
    assert lease_seconds(45.0, 1.0) == 44.0
    # a heartbeat interval close to the session timeout (allowed): still longer than one interval
    assert lease_seconds(6.0, 5.0) == 5.5 and lease_seconds(6.0, 5.0) > 5.0


def test_a_cycle_in_the_parent_records_is_an_error_not_an_endless_loop() -> None:
    from stream_dedupe.core.unionfind import UnionFind
    from stream_dedupe.errors import StateMismatchError
    from stream_dedupe.storage.state import StateView

    state = StateView(MemoryStore())
    state.set_parent("a", "b")  # what two deciders writing one state at once left behind
    state.set_parent("b", "a")
    with pytest.raises(StateMismatchError, match="form a cycle: the state was written by two deciders at once"):
        UnionFind(state).find("a")
    state.set_parent("c", "d")  # a plain chain is still followed and compressed
    state.set_parent("d", "e")
    assert UnionFind(state).find("c") == "e" and state.get_parent("c") == "e"
