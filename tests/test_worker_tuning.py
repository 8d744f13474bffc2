"""Worker tuning settings (issue 15): --jobs and the cgroup CPU quota, --compression-level, the cluster-scan budget."""

from __future__ import annotations

from pathlib import Path

import pytest

from stream_dedupe import sign_pool
from stream_dedupe.sign_pool import cgroup_cpu_quota, usable_cores
from stream_dedupe.worker.errors import WorkerConfigError
from stream_dedupe.worker.settings import WorkerSettings


def _v1(tmp: Path, quota: int, period: int = 100_000) -> Path:
    d = tmp / "cpu"
    d.mkdir()
    (d / "cpu.cfs_quota_us").write_text(f"{quota}\n")
    (d / "cpu.cfs_period_us").write_text(f"{period}\n")
    return d


def test_cgroup_v2_quota(tmp_path: Path) -> None:
    f = tmp_path / "cpu.max"
    f.write_text("250000 100000\n")
    assert cgroup_cpu_quota(f, tmp_path / "none") == 2.5
    f.write_text("max 100000\n")
    assert cgroup_cpu_quota(f, tmp_path / "none") is None


def test_cgroup_v1_quota(tmp_path: Path) -> None:
    assert cgroup_cpu_quota(tmp_path / "no-cpu.max", _v1(tmp_path, 150_000)) == 1.5
    assert cgroup_cpu_quota(tmp_path / "no-cpu.max", tmp_path / "nothing") is None


def test_cgroup_v1_unlimited(tmp_path: Path) -> None:
    assert cgroup_cpu_quota(tmp_path / "no-cpu.max", _v1(tmp_path, -1)) is None


def test_explicit_jobs() -> None:
    assert WorkerSettings.load(env={}).sign_processes() == 0  # the default: the worker signs in-process
    assert WorkerSettings.load(env={}, jobs=1).sign_processes() == 0
    assert WorkerSettings.load(env={}, jobs=3).sign_processes() == 2
    assert WorkerSettings.load(env={"STREAM_DEDUPE_JOBS": "4"}).sign_processes() == 3


@pytest.mark.parametrize("bad", [-1, 65])
def test_jobs_out_of_range_says_how_to_fix(bad: int) -> None:
    with pytest.raises(WorkerConfigError, match=r"jobs must be between 0 and 64.*STREAM_DEDUPE_JOBS or --jobs"):
        WorkerSettings.load(env={}, jobs=bad)


def test_jobs_0_follows_the_usable_cores_and_the_cgroup_quota(monkeypatch: pytest.MonkeyPatch) -> None:
    auto = WorkerSettings.load(env={}, jobs=0)
    monkeypatch.setattr(sign_pool.os, "sched_getaffinity", lambda _: {0, 1, 2, 3})
    monkeypatch.setattr(sign_pool, "cgroup_cpu_quota", lambda: None)
    assert auto.sign_processes() == 3  # no quota (a bare host, a pod without limits.cpu): every core
    monkeypatch.setattr(sign_pool, "cgroup_cpu_quota", lambda: 2.5)
    assert auto.sign_processes() == 2  # limits.cpu 2500m: 3 jobs, 2 signing processes
    monkeypatch.setattr(sign_pool, "cgroup_cpu_quota", lambda: 0.5)
    assert auto.sign_processes() == 0  # half a core: sign in-process


def test_usable_cores_is_lowered_to_the_quota(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sign_pool, "cgroup_cpu_quota", lambda: 0.5)
    assert usable_cores() == 1
    monkeypatch.setattr(sign_pool, "cgroup_cpu_quota", lambda: None)
    assert usable_cores() >= 1


@pytest.mark.parametrize("bad", [0, 23])
def test_compression_level_out_of_range_says_how_to_fix(bad: int) -> None:
    with pytest.raises(WorkerConfigError, match=r"compression_level must be between 1 and 22.*--compression-level"):
        WorkerSettings.load(env={}, compression_level=bad)


def test_compression_level_from_the_environment() -> None:
    assert WorkerSettings.load(env={"STREAM_DEDUPE_COMPRESSION_LEVEL": "1"}).compression_level == 1
    assert WorkerSettings.load(env={}).compression_level == 3


def test_cluster_scan_takes_a_bounded_share_of_the_decider() -> None:
    from stream_dedupe.worker.gauges import CLUSTER_SCAN_MAX_INTERVAL, CLUSTER_SCAN_SHARE, next_cluster_scan

    assert next_cluster_scan(100.0, 0.001) <= 100.0 + 5.0  # a small state: at every 5 s refresh
    due = next_cluster_scan(100.0, 1.0)  # 1M documents: ~1 s of CPU per scan
    assert (due - 100.0) * CLUSTER_SCAN_SHARE == pytest.approx(1.0)
    assert next_cluster_scan(100.0, 60.0) == 100.0 + CLUSTER_SCAN_MAX_INTERVAL
