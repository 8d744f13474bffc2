"""The embedded command end to end, as a user runs it (a real subprocess, real RocksDB)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import orjson
import pytest

from .conftest import NEWSGROUPS, shared_file

CLI = [sys.executable, "-m", "stream_dedupe"]
MAIL_HEADER_BLOCK = r"(?s)\A.*?\n\n"  # everything up to the first blank line, as the corpus defines "body"


def cli(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=600)
    if check and result.returncode != 0:
        raise AssertionError(f"exit {result.returncode}\nstdout:{result.stdout}\nstderr:{result.stderr}")
    return result


def read_jsonl(path: Path) -> list[dict[str, object]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def doc_events(events: list[dict[str, object]]) -> list[dict[str, object]]:
    return [e for e in events if e["event"] in ("new", "duplicate-of", "unchanged", "deleted", "invalid")]


def test_newsgroups_exact_duplicate_bodies_share_a_cluster(tmp_path: Path, newsgroups: list[dict[str, object]]) -> None:
    events, deduped = tmp_path / "events.jsonl", tmp_path / "deduped.jsonl"
    result = cli(
        "dedupe",
        str(shared_file(NEWSGROUPS)),
        "--state",
        str(tmp_path / "s"),
        "--events",
        str(events),
        "--deduped",
        str(deduped),
        "--strip-pattern",
        MAIL_HEADER_BLOCK,
        "--no-progress",
    )
    assert "stream-dedupe summary" in result.stderr
    evs = read_jsonl(events)
    assert [e["id"] for e in doc_events(evs)] == [d["id"] for d in newsgroups]
    cluster_of = {}
    for e in read_jsonl(events):
        if e["event"] in ("new", "duplicate-of"):
            cluster_of[e["id"]] = e["cluster"]
    # cluster labels in events can change later (merges); use the final export
    clusters = cli("clusters", "--state", str(tmp_path / "s"), "--min-size", "1")
    final = {}
    representatives = set()
    for line in clusters.stdout.splitlines():
        c = orjson.loads(line)
        assert c["canonical"] in c["representatives"]
        representatives.update(c["representatives"])
        for m in c["members"]:
            final[m] = c["cluster"]
    # posts with nothing below their header block are empty-text outcomes, never in a cluster
    empty = {e["id"] for e in read_jsonl(events) if e["event"] == "invalid" and e["reason"] == "empty-text"}
    assert all(not str(d["text"]).split("\n\n", 1)[-1].strip(" \n\t.-_*=>") for d in newsgroups if d["id"] in empty)
    assert set(final) == {d["id"] for d in newsgroups} - empty
    groups: dict[str, list[str]] = defaultdict(list)
    for d in newsgroups:
        if int(d["body_dup_group_size"]) > 1 and d["id"] not in empty:  # type: ignore[call-overload]
            body = str(d["text"]).split("\n\n", 1)
            groups[body[1].strip() if len(body) == 2 else ""].append(str(d["id"]))
    empty_dups = sum(1 for d in newsgroups if int(d["body_dup_group_size"]) > 1 and d["id"] in empty)  # type: ignore[call-overload]
    assert sum(len(g) for g in groups.values()) + empty_dups == 144 and empty_dups < 40
    for ids in groups.values():
        assert len({final[i] for i in ids}) == 1, ids
    # the deduped set is exactly the representatives: at least one per cluster, each once
    canon = read_jsonl(deduped)
    assert {c["id"] for c in canon} == representatives
    assert len(set(final.values())) <= len(canon) == len(representatives)


def test_bad_input_yields_invalid_events_and_strict_fails(tmp_path: Path) -> None:
    lines = [
        b'{"id": "a", "text": "a perfectly fine document with enough words to be signed by minhash ok"}',
        b"not json at all",
        b'{"text": "no id"}',
        b'{"id": "b", "text": 42}',
        b'{"id": "c", "text": "bad \xff utf8"}',
        b"",
        b'{"id": "big", "text": "' + b"x " * 400 + b'"}',
        b'{"id": "d", "text": "a perfectly fine document with enough words to be signed by minhash ok!"}',
    ]
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    events = tmp_path / "ev.jsonl"
    args = (
        "dedupe",
        str(path),
        "--state",
        str(tmp_path / "s"),
        "--events",
        str(events),
        "--no-progress",
        "--max-doc-bytes",
        "400",
    )
    assert cli(*args).returncode == 0
    evs = doc_events(read_jsonl(events))
    assert len(evs) == len(lines)
    reasons = [(e.get("line"), e.get("reason")) for e in evs if e["event"] == "invalid"]
    assert reasons == [
        (2, "not-json"),
        (3, "missing-id"),
        (4, "bad-text"),
        (5, "invalid-utf8"),
        (6, "not-json"),
        (7, "too-large"),
    ]
    assert evs[-1]["event"] == "duplicate-of" and evs[-1]["of"] == "a"
    strict = cli(*args, "--strict", check=False)
    assert strict.returncode == 1 and "invalid record" in strict.stderr
    # without --events the command still says what was wrong and where
    quiet = [
        str(tmp_path / "s2") if a == str(tmp_path / "s") else a for a in args if a not in ("--events", str(events))
    ]
    strict = cli(*quiet, "--strict", check=False)
    assert strict.returncode == 1
    assert "6 invalid record(s) (not-json 2, " in strict.stderr and "missing-id 1" in strict.stderr
    assert f"the first at {path}:2: record is not JSON" in strict.stderr and "pass --events FILE" in strict.stderr


def test_parameter_mismatch_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_bytes(b'{"id": "a", "text": "hello"}\n')
    cli("dedupe", str(path), "--state", str(tmp_path / "s"), "--no-progress")
    # no parameters given: the state's are used
    cli("dedupe", str(path), "--state", str(tmp_path / "s"), "--no-progress")
    bad = cli("dedupe", str(path), "--state", str(tmp_path / "s"), "--num-perm", "64", "--no-progress", check=False)
    assert bad.returncode == 2
    assert "num_perm: state has 128" in bad.stderr and "new directory" in bad.stderr
    missing = cli("dedupe", str(tmp_path / "nope.jsonl"), "--state", str(tmp_path / "s"), check=False)
    assert missing.returncode == 2 and "does not exist" in missing.stderr


def _final_clusters(state: Path) -> list[str]:
    return cli("clusters", "--state", str(state)).stdout.splitlines()


def _clean_run_and_interrupted_args(tmp_path: Path) -> tuple[Path, Path, Path, list[str]]:
    """A clean run's state, and the command of a run over the same input to interrupt."""
    source = shared_file(NEWSGROUPS)
    clean = tmp_path / "clean"
    cli("dedupe", str(source), "--state", str(clean), "--no-progress")
    state, events = tmp_path / "s", tmp_path / "ev.jsonl"
    args = [
        *CLI,
        "dedupe",
        str(source),
        "--state",
        str(state),
        "--events",
        str(events),
        "--batch-size",
        "64",
        "--no-progress",
    ]
    return clean, state, events, args


def _start_and_wait_for_events(args: list[str], events: Path, size: int) -> subprocess.Popen[str]:
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (not events.exists() or events.stat().st_size < size):
        time.sleep(0.05)
    return proc


def test_interrupt_and_resume_equals_clean_run(tmp_path: Path) -> None:
    clean, state, events, args = _clean_run_and_interrupted_args(tmp_path)
    proc = _start_and_wait_for_events(args, events, 200_000)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert "resume" in stderr
    partial = doc_events(read_jsonl(events))
    assert 0 < len(partial) < 18846
    resumed = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed after line" in resumed.stderr
    evs = doc_events(read_jsonl(events))
    assert len(evs) == 18846
    assert len({e["id"] for e in evs}) == 18846  # nothing decided twice
    assert all(e["event"] != "unchanged" for e in evs)
    assert _final_clusters(state) == _final_clusters(clean)


def test_the_events_of_a_run_that_cannot_be_resumed_are_never_overwritten(tmp_path: Path) -> None:
    """A run from standard input that stopped cannot be resumed: its decisions are only in its events file.

    Running the command again would decide its documents ``unchanged`` and overwrite that file;
    it is refused with what to do, and so is a run over other inputs. The file is left as it was.
    """
    source = shared_file(NEWSGROUPS)
    state, events = tmp_path / "s", tmp_path / "ev.jsonl"
    args = [*CLI, "dedupe", "-", "--state", str(state), "--events", str(events), "--batch-size", "64", "--no-progress"]
    with open(source, "rb") as stdin:
        proc = subprocess.Popen(args, stdin=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and (not events.exists() or events.stat().st_size < 200_000):
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert "Standard input cannot be resumed" in stderr
    kept = events.read_bytes()
    with open(source, "rb") as stdin:
        again = subprocess.run(args, stdin=stdin, capture_output=True, text=True, timeout=600)
    assert again.returncode == 2 and "standard input cannot be read again" in again.stderr, again.stderr
    assert "another --events" in again.stderr
    other = tmp_path / "other.jsonl"
    other.write_bytes(b'{"id": "zz", "text": "something new"}\n')
    refused = cli("dedupe", str(other), "--state", str(state), "--events", str(events), check=False)
    assert refused.returncode == 2 and "did not finish" in refused.stderr
    assert events.read_bytes() == kept
    # another events file: the run goes ahead, the committed documents are known
    with open(source, "rb") as stdin:
        rest = subprocess.run(
            [*CLI, "dedupe", "-", "--state", str(state), "--events", str(tmp_path / "rest.jsonl"), "--no-progress"],
            stdin=stdin,
            capture_output=True,
            text=True,
            timeout=600,
        )
    assert rest.returncode == 0, rest.stderr
    decided = {e["id"] for e in doc_events(read_jsonl(events))}
    again_events = doc_events(read_jsonl(tmp_path / "rest.jsonl"))
    assert {e["id"] for e in again_events if e["event"] == "unchanged"} >= decided - {None}


@pytest.mark.parametrize("flushed", [False, True], ids=["before-a-flush", "after-a-flush"])
def test_kill_9_then_the_same_command_gives_a_clean_runs_events_and_clusters(tmp_path: Path, flushed: bool) -> None:
    # The run writes its state without RocksDB's log (it can redo what a kill loses): a kill
    # before the first memtable flush leaves nothing of the run, a later one the state as of the
    # last flush. Either way the same command finishes the run, and the events file holds each
    # event once (the events of batches not in the state are cut before they are decided again).
    _, state, events, args = _clean_run_and_interrupted_args(tmp_path)
    clean_events = tmp_path / "clean.jsonl"
    clean = tmp_path / "clean64"
    cli(*args[3:6], str(clean), "--events", str(clean_events), *args[9:])
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        written = events.stat().st_size if events.exists() else 0
        if (written > 2_500_000 and any(state.glob("*.sst"))) if flushed else written > 300_000:
            break
        time.sleep(0.02)
    assert proc.poll() is None, "the run ended before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    killed, clean_bytes = events.read_bytes(), clean_events.read_bytes()
    resumed = cli(*args[3:])
    assert ("resumed after line" in resumed.stderr) == flushed, resumed.stderr
    if flushed:  # the file was cut back to the end of a whole batch's events, the state's last one
        said = re.search(r"cut ([\d,]+) bytes of events of batches the state does not hold", resumed.stderr)
        kept = len(killed) - (int(said.group(1).replace(",", "")) if said else 0)
        assert 0 < kept <= len(killed) and killed[:kept] == clean_bytes[:kept] and clean_bytes[kept - 1] == ord("\n")
    assert events.read_bytes() == clean_bytes
    assert _final_clusters(state) == _final_clusters(clean)


def test_a_run_resumed_into_another_events_file_leaves_each_event_in_one_file(tmp_path: Path) -> None:
    """A kill, then the same command with another ``--events``: the first file is cut back to the
    state's last batch (its tail is decided again into the second), so the two files together are
    a clean run's events, each once (an outside walk-through found the overlap duplicated)."""
    _, state, events, args = _clean_run_and_interrupted_args(tmp_path)
    clean_events = tmp_path / "clean.jsonl"
    cli(*args[3:6], str(tmp_path / "clean64"), "--events", str(clean_events), *args[9:])
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if (events.stat().st_size if events.exists() else 0) > 2_500_000 and any(state.glob("*.sst")):
            break
        time.sleep(0.02)
    assert proc.poll() is None, "the run ended before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    second = tmp_path / "second.jsonl"
    resumed = cli(*args[3:8], str(second), *args[9:])
    assert "resumed after line" in resumed.stderr, resumed.stderr
    assert f"whose events are in {events.resolve()}" in " ".join(resumed.stderr.split()), resumed.stderr
    assert events.read_bytes() + second.read_bytes() == clean_events.read_bytes()


def test_explain_pair_from_state_and_from_files(tmp_path: Path) -> None:
    base = " ".join(f"word{i}" for i in range(60))
    path = tmp_path / "in.jsonl"
    path.write_bytes(
        orjson.dumps({"id": "a", "text": base})
        + b"\n"
        + orjson.dumps({"id": "b", "text": base + " and one more"})
        + b"\n"
    )
    cli("dedupe", str(path), "--state", str(tmp_path / "s"), "--no-progress")
    out = cli("explain", "a", "b", "--state", str(tmp_path / "s")).stdout
    assert "duplicate" in out and "exact Jaccard" in out and "colliding LSH bands" in out
    assert "0.9508" in out  # exact: 58 shared word 3-grams of 61
    (tmp_path / "x.txt").write_text(base)
    (tmp_path / "y.txt").write_text("something else entirely")
    out = cli("explain", str(tmp_path / "x.txt"), str(tmp_path / "y.txt")).stdout
    assert "not a duplicate" in out and "0.0000" in out
    assert "not a duplicate (fewer than min_tokens (10) tokens: only exact copies pair)" in out  # whole cells in a pipe
    (tmp_path / "empty.txt").write_text(" ... \n")  # no words: the engine's empty-text, never a duplicate
    out = " ".join(cli("explain", str(tmp_path / "empty.txt"), str(tmp_path / "empty.txt")).stdout.split())
    assert "not a duplicate" in out and "refused as empty-text" in out
    import gzip

    (tmp_path / "x.json.gz").write_bytes(gzip.compress(orjson.dumps({"id": "x", "text": base})))
    out = cli("explain", str(tmp_path / "x.json.gz"), str(tmp_path / "x.txt")).stdout
    assert "duplicate (the same normalized text" in out  # read decompressed, as dedupe reads it
    several = cli("explain", str(path), str(tmp_path / "x.txt"), check=False)
    assert several.returncode == 2 and "holds 2 lines of JSON" in several.stderr and "--state" in several.stderr
    missing = cli("explain", "a", "zzz", "--state", str(tmp_path / "s"), check=False)
    assert missing.returncode == 2 and "not in the state" in missing.stderr


def test_stdin_and_gzip_inputs(tmp_path: Path) -> None:
    import gzip

    data = b'{"id": "a", "text": "hello there"}\n{"id": "b", "text": "Hello, there!"}\n'
    (tmp_path / "in.jsonl.gz").write_bytes(gzip.compress(data))
    cli(
        "dedupe",
        str(tmp_path / "in.jsonl.gz"),
        "--state",
        str(tmp_path / "s1"),
        "--events",
        str(tmp_path / "e1"),
        "--no-progress",
    )
    result = subprocess.run(
        [*CLI, "dedupe", "-", "--state", str(tmp_path / "s2"), "--events", "-", "--no-progress"],
        input=data,
        capture_output=True,
        timeout=120,
    )
    assert result.returncode == 0
    from_stdin = [orjson.loads(x) for x in result.stdout.splitlines()]
    assert from_stdin == read_jsonl(tmp_path / "e1")
    assert from_stdin[1]["event"] == "duplicate-of" and from_stdin[1]["exact"] is True


def test_expire_command(tmp_path: Path) -> None:
    base = " ".join(f"word{i}" for i in range(40))
    lines = [
        {"id": "old-news", "text": base + " old and longer", "source": "news", "updated_at": "2026-01-01T00:00:00Z"},
        {"id": "new-news", "text": base + " new", "source": "news", "updated_at": "2026-11-30T00:00:00Z"},
        {
            "id": "runbook",
            "text": "restart the service then check the dashboard",
            "source": "runbooks",
            "updated_at": "2020-01-01T00:00:00Z",
        },
    ]
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))
    state = tmp_path / "s"
    cli("dedupe", str(path), "--state", str(state), "--no-progress")
    args = ("expire", "--state", str(state), "--max-age", "news=30d", "--now", "2026-12-01T00:00:00Z")
    assert cli(*args, "--dry-run").stdout.split() == ["old-news"]
    typo = cli(*args, "--max-age", "News=7d", "--dry-run")
    assert typo.stdout.split() == ["old-news"] and "no document of the state has source 'News'" in typo.stderr
    assert "--max-age News=7d expires nothing" in " ".join(typo.stderr.split()) and "'news'" not in typo.stderr
    events = tmp_path / "ev.jsonl"
    result = cli(*args, "--events", str(events))
    assert "expired 1 document;" in result.stderr
    evs = read_jsonl(events)
    assert evs[0]["event"] == "deleted" and evs[0]["id"] == "old-news"
    assert any(e["event"] == "canonical-changed" and e["canonical"] == "new-news" for e in evs)
    assert cli(*args, "--dry-run").stdout.split() == []
    bad = cli("expire", "--state", str(state), "--max-age", "news", check=False)
    assert bad.returncode == 2 and "SOURCE=AGE" in bad.stderr


def test_deletions_file(tmp_path: Path) -> None:
    base = " ".join(f"word{i}" for i in range(40))
    path = tmp_path / "in.jsonl"
    path.write_bytes(
        b"".join(
            orjson.dumps({"id": i, "text": base + t}) + b"\n"
            for i, t in (("a", ""), ("b", " plus a longer tail"), ("c", " x"))
        )
    )
    deletions = tmp_path / "gone.txt"
    deletions.write_text('b\n{"id": "zzz"}\n{"oops": 1}\n')
    events = tmp_path / "ev.jsonl"
    cli(
        "dedupe",
        str(path),
        "--deletions",
        str(deletions),
        "--state",
        str(tmp_path / "s"),
        "--events",
        str(events),
        "--no-progress",
    )
    evs = doc_events(read_jsonl(events))
    assert [(e["event"], e["id"]) for e in evs] == [
        ("new", "a"),
        ("new", "b"),
        ("duplicate-of", "c"),
        ("deleted", "b"),
        ("deleted", "zzz"),
        ("invalid", None),
    ]
    assert evs[4]["known"] is False and evs[5]["reason"] == "missing-id" and evs[5]["line"] == 3
    clusters = cli("clusters", "--state", str(tmp_path / "s")).stdout.splitlines()
    assert [orjson.loads(c)["members"] for c in clusters] == [["a", "c"]]
    # deletions alone, without an input file
    (tmp_path / "more.txt").write_text("c\n")
    alone = cli("dedupe", "--deletions", str(tmp_path / "more.txt"), "--state", str(tmp_path / "s"), "--events", "-")
    assert [
        (e["event"], e["id"], e["known"]) for e in doc_events(list(map(orjson.loads, alone.stdout.splitlines())))
    ] == [("deleted", "c", True)]
    nothing = cli("dedupe", "--state", str(tmp_path / "s"), check=False)
    assert nothing.returncode == 2 and "no input given" in nothing.stderr


def test_record_bounds_apply_to_the_embedded_command(tmp_path: Path) -> None:
    """Issue 13: a JSON bomb is too-deep, long ids and huge metadata are refused, too-large keeps its id."""
    fine = b'{"id": "ok", "text": "a perfectly fine document with enough words to be signed by minhash ok"}'
    lines = [
        b'{"id": "bomb", "text": "x", "metadata": {"a": ' + b"[" * 10_000 + b"]" * 10_000 + b"}}",
        orjson.dumps({"id": "i" * 600, "text": "a long id"}),
        orjson.dumps({"id": "meta", "text": "x", "metadata": {f"f{i}": i for i in range(50_000)}}),
        orjson.dumps({"id": "huge", "text": "y " * 600_000}),
        fine,
    ]
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    events = tmp_path / "ev.jsonl"
    cli("dedupe", str(path), "--state", str(tmp_path / "s"), "--events", str(events), "--no-progress")
    evs = doc_events(read_jsonl(events))
    assert [(e["event"], e.get("reason"), e["id"]) for e in evs] == [
        ("invalid", "too-deep", "bomb"),
        ("invalid", "id-too-long", None),
        ("invalid", "metadata-too-large", "meta"),
        ("invalid", "too-large", "huge"),
        ("new", None, "ok"),
    ]


def test_boilerplate_of_a_state_that_learned_nothing_says_so(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_bytes(b'{"id": "a", "text": "one page with its own words only"}\n')
    cli("dedupe", str(path), "--state", str(tmp_path / "s"), "--no-progress")
    listed = cli("boilerplate", "--state", str(tmp_path / "s"))
    assert listed.stdout == "" and "no line learned for any source yet" in listed.stderr


def test_the_summary_counts_recrawls_recognized_by_their_fingerprint(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_bytes(
        b"".join(
            orjson.dumps({"id": f"p{i}", "text": f"page {i} of the portal with its own words"}) + b"\n"
            for i in range(5)
        )
    )
    args = ["dedupe", str(path), "--state", str(tmp_path / "s"), "--no-progress"]
    first, again = cli(*args).stderr, cli(*args).stderr
    assert re.search(r"unchanged re-crawls recognized \(texts not read\)\s+0\n", first)
    assert re.search(r"unchanged re-crawls recognized \(texts not read\)\s+5\n", again)
