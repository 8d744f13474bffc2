"""``dedupe --jobs N``: signing in worker processes changes no event, and fails or stops cleanly."""

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

from stream_dedupe import sign_pool
from stream_dedupe.config import BoilerplateConfig, DedupeParams, RuntimeLimits
from stream_dedupe.core.engine import DedupeEngine
from stream_dedupe.embedded import run
from stream_dedupe.sign_pool import SignPool, SignPoolError, default_jobs, start_pool, usable_cores
from stream_dedupe.storage.memory import MemoryStore

from .helpers import text
from .mixed_corpus import write_mixed

CLI = [sys.executable, "-m", "stream_dedupe", "dedupe"]
OPTIONS = ["--no-progress", "--batch-size", "37", "--boilerplate-min-docs", "5"]


def _dedupe(tmp: Path, name: str, corpus: Path, deletions: Path, jobs: int | None, pool_bytes: int = 0) -> bytes:
    events = tmp / f"{name}.jsonl"
    env = {**os.environ, "STREAM_DEDUPE_POOL_BYTES": str(pool_bytes)}
    cmd = [
        *CLI,
        str(corpus),
        "--state",
        str(tmp / name),
        "--events",
        str(events),
        "--deletions",
        str(deletions),
        *([] if jobs is None else ["--jobs", str(jobs)]),
        *OPTIONS,
    ]
    result = subprocess.run(cmd, capture_output=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr.decode()
    return events.read_bytes()


def test_the_same_events_byte_for_byte_for_any_number_of_jobs(tmp_path: Path) -> None:
    corpus, deletions = write_mixed(tmp_path)
    runs = {jobs: _dedupe(tmp_path, f"j{jobs}", corpus, deletions, jobs) for jobs in (1, 2, 3, 0, None)}
    assert runs[1] == runs[2] == runs[3] == runs[0] == runs[None]  # 0: the usable cores; None: the default
    kinds = {orjson.loads(line)["event"] for line in runs[1].splitlines()}
    assert {"new", "duplicate-of", "invalid", "deleted", "canonical-changed", "cover-changed"} <= kinds, kinds


def _engine() -> DedupeEngine:
    params = DedupeParams(boilerplate=BoilerplateConfig(learn=True, min_docs=5))
    return DedupeEngine(params, MemoryStore(), RuntimeLimits(batch_size=37))


def test_the_pool_signs_the_documents_and_the_boilerplate_learner_sees_the_same(tmp_path: Path) -> None:
    corpus, _ = write_mixed(tmp_path)
    alone, pooled = _engine(), _engine()
    out_alone, out_pooled = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    with open(out_alone, "wb") as fh:
        run(alone, [str(corpus)], fh, 37, 1 << 20)
    pool = SignPool(2)
    try:
        with open(out_pooled, "wb") as fh:
            run(pooled, [str(corpus)], fh, 37, 1 << 20, pool=pool)
    finally:
        pool.close()
    assert out_alone.read_bytes() == out_pooled.read_bytes()
    assert alone.counters["presigned"] == 0
    # the workers signed batches (this process signs the first one, and any a worker could not take)
    assert 0 < pooled.counters["presigned"] < pooled.counters["documents"]
    assert pooled.counters["boilerplate_lines_stripped"] == alone.counters["boilerplate_lines_stripped"] > 0
    # the workers parsed the documents and split them into lines too: this process only decided
    assert pooled.counters["lines_given"] >= pooled.counters["presigned"] > 0
    assert alone.counters["lines_given"] == 0


def test_a_recrawl_pass_is_prepared_here_while_its_pages_are_recognized(tmp_path: Path) -> None:
    """The pool would sign every text of an unchanged re-crawl, which the engine does not read.

    While the last batch was mostly recognized re-crawls, batches are parsed in this process; new
    documents go back to the pool. The events are those of the run without a pool, throughout.
    """
    corpus, _ = write_mixed(tmp_path)
    fresh = tmp_path / "fresh.jsonl"
    fresh.write_bytes(
        b"".join(
            orjson.dumps({"id": f"new{i}", "text": text(__import__("random").Random(i))}) + b"\n" for i in range(300)
        )
    )
    alone, pooled = _engine(), _engine()
    pool = SignPool(1)
    sent: list[int] = []
    submit = pool.submit_lines
    pool.submit_lines = lambda params, raws, limit: sent.append(len(raws)) or submit(params, raws, limit)  # type: ignore[method-assign]
    outputs = []
    try:
        for name in ("first", "again", "third", "fresh"):
            source = fresh if name == "fresh" else corpus
            for engine, use in ((alone, None), (pooled, pool)):
                out = tmp_path / f"{name}-{'pool' if use else 'alone'}.jsonl"
                with open(out, "wb") as fh:
                    run(engine, [str(source)], fh, 37, 1 << 20, pool=use)
                outputs.append(out.read_bytes())
            sent.append(-1)  # a pass ends
    finally:
        pool.close()
    assert outputs[0::2] == outputs[1::2]  # every pass: the same events with and without the pool
    passes = [[n for n in chunk if n] for chunk in _split(sent)]
    batches = -(-len(corpus.read_bytes().splitlines()) // 37)
    assert len(passes[0]) >= batches - 2  # a first pass: the pool prepares (nearly) every batch
    assert len(passes[2]) <= 2 < batches  # the third pass is all recognized: read ahead only
    assert pooled.counters["recognized_unchanged"] == alone.counters["recognized_unchanged"] > 0
    assert len(passes[3]) >= 3  # new documents: back to the pool after the first batch


def _split(marks: list[int]) -> list[list[int]]:
    out: list[list[int]] = [[]]
    for n in marks:
        if n == -1:
            out.append([])
        else:
            out[-1].append(n)
    return out[:-1]


def test_odd_lines_prepared_by_the_pool_get_the_outcomes_they_get_in_process(tmp_path: Path) -> None:
    corpus, _ = write_mixed(tmp_path)
    odd = [
        b"",  # blank
        b"   ",
        orjson.dumps({"id": "big", "text": "word " * 2000}),  # over max_doc_bytes: never sent to a worker
        b'{"id": "bad-utf8", "text": "caf' + bytes([0xE9]) + b'"}',
        b'{"id": "deep", "text": "x", "metadata": ' + b"[" * 1200 + b"]" * 1200 + b"}",  # too deep
        orjson.dumps({"id": "deleted-one", "deleted": True}),
        orjson.dumps({"id": 7, "text": "an id that is not a string"}),
    ]
    lines = corpus.read_bytes().splitlines()
    mixed = tmp_path / "odd.jsonl"
    mixed.write_bytes(b"\n".join(lines[:50] + odd + lines[50:] + odd) + b"\n")
    alone, pooled = _engine(), _engine()
    out_alone, out_pooled = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    with open(out_alone, "wb") as fh:
        run(alone, [str(mixed)], fh, 37, 4096)
    pool = SignPool(1)
    try:
        with open(out_pooled, "wb") as fh:
            run(pooled, [str(mixed)], fh, 37, 4096, pool=pool)
    finally:
        pool.close()
    assert out_alone.read_bytes() == out_pooled.read_bytes()
    assert pooled.counters["lines_given"] > 0
    events = [orjson.loads(line) for line in out_pooled.read_bytes().splitlines()]
    reasons = [e["reason"] for e in events if e["event"] == "invalid"]
    for reason in ("not-json", "too-large", "invalid-utf8", "too-deep", "missing-id"):
        assert reason in reasons, (reason, reasons)


def test_small_inputs_and_one_job_start_no_process() -> None:
    assert start_pool(1, 1 << 30) is None
    assert start_pool(4, 100) is None
    assert start_pool(4, None) is None  # standard input: signed in-process
    assert usable_cores() == len(os.sched_getaffinity(0))


def test_a_worker_that_dies_gives_a_clear_error_not_a_hang() -> None:
    engine = _engine()
    pool = SignPool(1)
    try:
        for pid in list(pool._executor._processes):  # the only way to reach the workers
            os.kill(pid, signal.SIGKILL)
        time.sleep(0.5)
        with pytest.raises(SignPoolError, match=r"signing worker process died.*run the same command again"):
            pool.result(engine.signer, pool.submit(engine.signer, ["some words to sign here"]))
    finally:
        pool.close()


def test_kill_9_of_the_main_process_takes_the_workers_with_it(tmp_path: Path) -> None:
    corpus, _ = write_mixed(tmp_path, families=600)
    events = tmp_path / "ev.jsonl"
    env = {**os.environ, "STREAM_DEDUPE_POOL_BYTES": "0"}
    cmd = [*CLI, str(corpus), "--state", str(tmp_path / "s"), "--events", str(events), "--jobs", "3", *OPTIONS]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 120
    while (not events.exists() or events.stat().st_size == 0) and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)  # hangs if a worker kept the pipes open
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    pytest.fail("worker processes outlived their killed parent")


def _start_a_run_to_cut(
    tmp_path: Path, seed: int, jobs: int
) -> tuple[subprocess.Popen[bytes], list[str], dict[str, str], Path, bytes]:
    """Start ``dedupe --jobs`` on 6,000 documents and return once it has written some events.

    Returns the process, its command and environment (to run it again), its events file, and
    the events of the same input deduped whole with ``--jobs 1``.
    """
    rng = random.Random(seed)
    corpus = tmp_path / "big.jsonl"
    corpus.write_bytes(b"".join(orjson.dumps({"id": f"d{i}", "text": text(rng, 150)}) + b"\n" for i in range(6000)))
    deletions = tmp_path / "none.txt"
    deletions.write_text("")
    expected = _dedupe(tmp_path, "whole", corpus, deletions, 1)
    events = tmp_path / "cut.jsonl"
    env = {**os.environ, "STREAM_DEDUPE_POOL_BYTES": "0"}
    cmd = [*CLI, str(corpus), "--state", str(tmp_path / "cut"), "--events", str(events)]
    cmd += ["--deletions", str(deletions), "--jobs", str(jobs), *OPTIONS]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 120
    while (not events.exists() or events.stat().st_size < 20_000) and time.monotonic() < deadline:
        time.sleep(0.05)
    return proc, cmd, env, events, expected


def test_ctrl_c_stops_every_process_and_the_run_resumes_to_the_same_events(tmp_path: Path) -> None:
    proc, cmd, env, events, expected = _start_a_run_to_cut(tmp_path, seed=1, jobs=3)
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole process group
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr.decode()
    assert b"interrupted" in stderr and b"Run the same command again to resume" in stderr
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # no worker left behind
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail("worker processes outlived the interrupted run")
    resumed = subprocess.run(cmd, capture_output=True, env=env, timeout=600)
    assert resumed.returncode == 0, resumed.stderr.decode()
    assert events.read_bytes() == expected


def test_a_worker_killed_mid_run_stops_the_run_clearly_and_it_resumes_to_the_same_events(tmp_path: Path) -> None:
    proc, cmd, env, events, expected = _start_a_run_to_cut(tmp_path, seed=2, jobs=2)
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
    assert len(children) == 1, children  # --jobs 2: one worker process
    os.kill(int(children[0]), signal.SIGKILL)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode not in (0, None), stderr.decode()
    assert b"signing worker process died" in stderr and b"run the same command again to resume" in stderr
    resumed = subprocess.run(cmd, capture_output=True, env=env, timeout=600)
    assert resumed.returncode == 0, resumed.stderr.decode()
    assert events.read_bytes() == expected


def test_negative_jobs_is_refused_with_the_fix(tmp_path: Path) -> None:
    corpus, _ = write_mixed(tmp_path)
    result = subprocess.run([*CLI, str(corpus), "--state", str(tmp_path / "s"), "--jobs", "-1"], capture_output=True)
    assert result.returncode == 2
    assert "--jobs must be 0 (the usable cores) or more, got -1" in result.stderr.decode()


def _die_writing_a_result() -> None:
    """In a pool worker: start a result message on the executor's pipe, then die (a kill mid-write)."""
    import struct

    frame = sys._getframe()
    while frame is not None and "result_queue" not in frame.f_locals:
        frame = frame.f_back
    assert frame is not None, "concurrent.futures.process._process_worker has no result_queue any more"
    writer = frame.f_locals["result_queue"]._writer
    os.write(writer.fileno(), struct.pack("!i", 1 << 20) + b"\x80" * 100)  # 100 of 1 MiB announced
    os._exit(1)


def test_a_worker_killed_while_writing_its_result_fails_the_batch_instead_of_hanging() -> None:
    # ProcessPoolExecutor's thread then waits for the rest of the message forever and its futures
    # never finish: the worker's sign stage stalled so after a kill -9 of its signing process (CI).
    import threading

    pool = SignPool(1, "fork")
    future = pool._executor.submit(_die_writing_a_result)
    outcome: list[BaseException | None] = []

    def wait() -> None:
        try:
            pool.result(DedupeEngine(DedupeParams(), MemoryStore()).signer, future)
            outcome.append(None)
        except BaseException as exc:  # the test looks at what it was
            outcome.append(exc)

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    waiter.join(20)
    assert outcome and isinstance(outcome[0], SignPoolError), f"the wait did not end with SignPoolError: {outcome}"
    assert not future.done(), "the executor noticed by itself: this test no longer shows the hang"
    closer = threading.Thread(target=pool.close, daemon=True)
    closer.start()
    closer.join(20)
    assert not closer.is_alive(), "closing the pool hung"
    manager = pool._executor._executor_manager_thread
    if manager is not None:
        manager.join(20)
        assert not manager.is_alive(), "the executor's thread still waits (the interpreter's exit would hang)"


@pytest.mark.parametrize(("cores", "jobs"), [(1, 1), (2, 2), (8, 2)])
def test_the_default_is_one_signing_process_beside_the_decider(
    monkeypatch: pytest.MonkeyPatch, cores: int, jobs: int
) -> None:
    # more would sit idle: signing is about a fifth of the deciding process's work
    monkeypatch.setattr(sign_pool, "usable_cores", lambda: cores)
    assert default_jobs() == jobs
