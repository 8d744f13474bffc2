"""``dedupe --index-shards S``: shard processes with their own RocksDB change no output, and fail or stop cleanly.

Every run here is the real command in a fresh process, with real RocksDB states for the gather
and each shard process.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from .helpers import text
from .mixed_corpus import write_mixed

CLI = [sys.executable, "-m", "stream_dedupe"]
OPTIONS = ["--no-progress", "--batch-size", "37", "--boilerplate-min-docs", "5"]


def _dedupe(tmp: Path, name: str, corpus: Path, *extra: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
    cmd = [*CLI, "dedupe", str(corpus), "--state", str(tmp / name), "--events", str(tmp / f"{name}.events")]
    cmd += ["--deduped", str(tmp / f"{name}.deduped"), *OPTIONS, *extra]
    result = subprocess.run(cmd, capture_output=True, timeout=600)
    if check:
        assert result.returncode == 0, result.stderr.decode()
    return result


def _clusters(tmp: Path, name: str) -> bytes:
    out = tmp / f"{name}.clusters"
    result = subprocess.run([*CLI, "clusters", "--state", str(tmp / name), "-o", str(out)], capture_output=True)
    assert result.returncode == 0, result.stderr.decode()
    return out.read_bytes()


def _outputs(tmp: Path, name: str) -> tuple[bytes, bytes]:
    return (tmp / f"{name}.events").read_bytes(), (tmp / f"{name}.deduped").read_bytes()


def test_any_shard_count_gives_the_same_events_and_deduped_documents(tmp_path: Path) -> None:
    corpus, deletions = write_mixed(tmp_path)
    _dedupe(tmp_path, "plain", corpus, "--deletions", str(deletions))
    for shards in (2, 3):
        _dedupe(tmp_path, f"s{shards}", corpus, "--deletions", str(deletions), "--index-shards", str(shards))
        assert _outputs(tmp_path, f"s{shards}") == _outputs(tmp_path, "plain")
        assert _clusters(tmp_path, f"s{shards}") == _clusters(tmp_path, "plain")
        assert sorted(p.name for p in (tmp_path / f"s{shards}" / "shards").iterdir()) == [str(i) for i in range(shards)]
    kinds = {orjson.loads(line)["event"] for line in _outputs(tmp_path, "plain")[0].splitlines()}
    assert {"new", "duplicate-of", "invalid", "deleted", "canonical-changed", "cover-changed"} <= kinds, kinds


def test_a_sharded_state_reopens_with_its_shards_and_runs_on_incrementally(tmp_path: Path) -> None:
    corpus, _ = write_mixed(tmp_path)
    lines = corpus.read_bytes().splitlines(keepends=True)
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    first.write_bytes(b"".join(lines[: len(lines) // 2]))
    second.write_bytes(b"".join(lines[len(lines) // 2 :]))
    for name, flags in (("plain", []), ("sharded", ["--index-shards", "2"])):
        _dedupe(tmp_path, name, first, *flags)
        _dedupe(tmp_path, name, second)  # the second run takes the layout from the state
    assert _outputs(tmp_path, "sharded") == _outputs(tmp_path, "plain")
    assert _clusters(tmp_path, "sharded") == _clusters(tmp_path, "plain")


def test_mismatched_shard_counts_are_refused_with_the_fix(tmp_path: Path) -> None:
    corpus, _ = write_mixed(tmp_path, families=5)
    _dedupe(tmp_path, "plain", corpus)
    refused = _dedupe(tmp_path, "plain", corpus, "--index-shards", "2", check=False)
    assert refused.returncode == 2
    assert b"built without index shards" in refused.stderr and b"new state" in refused.stderr
    _dedupe(tmp_path, "two", corpus, "--index-shards", "2")
    refused = _dedupe(tmp_path, "two", corpus, "--index-shards", "3", check=False)
    assert refused.returncode == 2 and b"--index-shards 2" in refused.stderr
    refused = _dedupe(tmp_path, "zero", corpus, "--index-shards", "0", check=False)
    assert refused.returncode == 2 and b"must be 1" in refused.stderr
    assert not (tmp_path / "zero").exists()  # refused before the state was created


def _big_corpus(tmp: Path, docs: int = 6000) -> Path:
    rng = random.Random(5)
    bases = [text(rng, 150) for _ in range(docs // 3)]
    corpus = tmp / "big.jsonl"
    lines = []
    for i in range(docs):
        body = bases[i % len(bases)] if i % 3 else text(rng, 150)
        lines.append(orjson.dumps({"id": f"d{i}", "text": body + f" n{i % 7}"}) + b"\n")
    corpus.write_bytes(b"".join(lines))
    return corpus


def _shard_pids(parent: int) -> list[int]:
    """The shard processes of a running command (spawned children running ``spawn_main``)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == parent and b"spawn_main" in cmdline and b"resource_tracker" not in cmdline:
            found.append(int(entry.name))
    return found


def _start(tmp: Path, name: str, corpus: Path, shards: int) -> subprocess.Popen[bytes]:
    cmd = [*CLI, "dedupe", str(corpus), "--state", str(tmp / name), "--events", str(tmp / f"{name}.events")]
    cmd += [*OPTIONS, "--index-shards", str(shards)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


def _wait_for_events(events: Path, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 120
    while (not events.exists() or events.stat().st_size < 20_000) and time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1].decode()
        time.sleep(0.02)


def _deduped_of(tmp: Path, name: str, corpus: Path) -> tuple[bytes, bytes]:
    """Resume (or finish) the run; its canonical documents and clusters."""
    _dedupe(tmp, name, corpus)
    return (tmp / f"{name}.deduped").read_bytes(), _clusters(tmp, name)


def test_kill_9_mid_run_loses_nothing_and_the_shards_die_with_the_command(tmp_path: Path) -> None:
    corpus = _big_corpus(tmp_path)
    expected = _deduped_of(tmp_path, "whole", corpus)
    proc = _start(tmp_path, "cut", corpus, 3)
    _wait_for_events(tmp_path / "cut.events", proc)
    shards = _shard_pids(proc.pid)
    assert len(shards) == 3
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)  # hangs if a shard process kept the pipes open
    deadline = time.monotonic() + 10
    while any(Path(f"/proc/{pid}").exists() for pid in shards) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(Path(f"/proc/{pid}").exists() for pid in shards), "shard processes outlived the command"
    assert _deduped_of(tmp_path, "cut", corpus) == expected


def test_a_shard_process_that_dies_fails_the_run_with_the_fix_and_the_rerun_finishes(tmp_path: Path) -> None:
    corpus = _big_corpus(tmp_path)
    expected = _deduped_of(tmp_path, "whole", corpus)
    proc = _start(tmp_path, "cut", corpus, 2)
    _wait_for_events(tmp_path / "cut.events", proc)
    os.kill(_shard_pids(proc.pid)[0], signal.SIGKILL)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 2, stderr.decode()
    assert b"process died" in stderr and b"run the same command again" in stderr, stderr.decode()
    assert _deduped_of(tmp_path, "cut", corpus) == expected


@pytest.mark.parametrize("shards", [2])
def test_the_read_only_commands_read_a_sharded_state(tmp_path: Path, shards: int) -> None:
    corpus, _ = write_mixed(tmp_path, families=20)
    _dedupe(tmp_path, "plain", corpus)
    _dedupe(tmp_path, "sharded", corpus, "--index-shards", str(shards))
    for command in (["explain", "f0", "f0-near"], ["explain", "f3", "s3"], ["boilerplate"]):
        outs = []
        for name in ("plain", "sharded"):
            result = subprocess.run([*CLI, *command, "--state", str(tmp_path / name)], capture_output=True)
            assert result.returncode == 0, result.stderr.decode()
            outs.append(result.stdout)
        assert outs[0] == outs[1], command


def test_reshard_copies_a_state_that_then_runs_on_exactly_as_the_original(tmp_path: Path) -> None:
    corpus, _ = write_mixed(tmp_path)
    lines = corpus.read_bytes().splitlines(keepends=True)
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    first.write_bytes(b"".join(lines[: len(lines) // 2]))
    second.write_bytes(b"".join(lines[len(lines) // 2 :]))
    _dedupe(tmp_path, "plain", first)
    _dedupe(tmp_path, "three", first, "--index-shards", "3")
    for source, target, shards in (("three", "two", 2), ("three", "one", 1), ("plain", "four", 4)):
        cmd = [*CLI, "reshard", "--state", str(tmp_path / source), "--to", str(tmp_path / target)]
        result = subprocess.run([*cmd, "--index-shards", str(shards)], capture_output=True)
        assert result.returncode == 0, result.stderr.decode()
        assert b"copied" in result.stderr
        assert (tmp_path / target / "shards").exists() == (shards > 1)
        assert _clusters(tmp_path, target) == _clusters(tmp_path, source)
    _dedupe(tmp_path, "plain", second)  # the original goes on...
    for target in ("two", "one", "four"):
        _dedupe(tmp_path, target, second)  # ...and so do the copies, with the same events and outputs
        assert _outputs(tmp_path, target) == _outputs(tmp_path, "plain"), target
        assert _clusters(tmp_path, target) == _clusters(tmp_path, "plain")
    refused = subprocess.run(
        [*CLI, "reshard", "--state", str(tmp_path / "plain"), "--to", str(tmp_path / "two"), "--index-shards", "2"],
        capture_output=True,
    )
    assert (
        refused.returncode == 2
        and f"--to {tmp_path / 'two'} is a stream-dedupe state already".encode() in refused.stderr
    )
    nested = subprocess.run(
        [*CLI, "reshard", "--state", str(tmp_path / "plain"), "--to", str(tmp_path / "plain" / "copy"),
         "--index-shards", "2"],
        capture_output=True,
    )  # fmt: skip
    assert nested.returncode == 2 and b"nest one inside the other" in nested.stderr
    assert not (tmp_path / "plain" / "copy").exists()


def test_an_interrupted_reshard_leaves_no_state_behind_and_the_next_one_completes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from stream_dedupe import reshard as reshard_module

    corpus, _ = write_mixed(tmp_path)
    _dedupe(tmp_path, "plain", corpus)
    target, partial = tmp_path / "copy", reshard_module.partial_dir(tmp_path / "copy")
    # an error half way (here the third namespace's copy): nothing is left, not even the partial copy
    calls = 0
    copy = reshard_module._copy

    def failing(*args: object) -> int:
        nonlocal calls
        calls += 1
        if calls == 3:
            raise OSError("disk full")
        return copy(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(reshard_module, "_copy", failing)
    with pytest.raises(OSError, match="disk full"):
        reshard_module.reshard(tmp_path / "plain", target, 2)
    assert not target.exists() and not partial.exists()
    monkeypatch.undo()
    # a kill -9 half way: the copy is in the partial directory only, never at --to
    big = tmp_path / "big.jsonl"
    rng = random.Random(3)
    big.write_bytes(b"".join(orjson.dumps({"id": f"d{i}", "text": text(rng, 150)}) + b"\n" for i in range(20000)))
    _dedupe(tmp_path, "big", big)
    cmd = [*CLI, "reshard", "--state", str(tmp_path / "big"), "--to", str(target), "--index-shards", "2"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not partial.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL, "the re-shard ended before it could be killed"
    assert partial.exists() and not target.exists()
    again = subprocess.run(cmd, capture_output=True, timeout=600)
    assert again.returncode == 0, again.stderr.decode()
    assert not partial.exists()
    assert _clusters(tmp_path, "copy") == _clusters(tmp_path, "big")


def test_reshard_keeps_the_buckets_a_full_bucket_kept_out(tmp_path: Path) -> None:
    """A document that found a bucket full joins it in no shard after a reshard: the copy runs on the same."""
    import random

    import orjson

    rng = random.Random(5)
    page = " ".join(f"w{rng.randrange(3000)}" for _ in range(120))
    other = " ".join(f"u{rng.randrange(3000)}" for _ in range(120))
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    first.write_bytes(
        b"".join(orjson.dumps({"id": f"c{i:02d}", "text": f"{page} visit {i}"}) + b"\n" for i in range(8))
    )
    # the first four leave the full buckets (re-crawled as another page), then c04 is re-crawled as a copy
    again = [orjson.dumps({"id": f"c{i:02d}", "text": f"{other} page {i}"}) for i in range(4)]
    again.append(orjson.dumps({"id": "c04", "text": f"{page} visit 44"}))
    second.write_bytes(b"".join(line + b"\n" for line in again))
    cap = ("--max-bucket-size", "4")
    _dedupe(tmp_path, "plain", first, *cap)
    result = subprocess.run(
        [*CLI, "reshard", "--state", str(tmp_path / "plain"), "--to", str(tmp_path / "two"), "--index-shards", "2"],
        capture_output=True,
    )
    assert result.returncode == 0, result.stderr.decode()
    _dedupe(tmp_path, "plain", second, *cap)
    _dedupe(tmp_path, "two", second, *cap)
    assert _outputs(tmp_path, "two") == _outputs(tmp_path, "plain")
    assert _clusters(tmp_path, "two") == _clusters(tmp_path, "plain")
