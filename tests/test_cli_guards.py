"""Nothing a user has is lost by a command: the decisions of an unfinished run, an input, a directory."""

from __future__ import annotations

import gzip
import os
from pathlib import Path
from typing import Any

import orjson

from .test_cli import cli
from .test_cli import read_jsonl as jsonl


def _cut_run(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A run stopped by a download cut short: its input, its state and its events."""
    docs = [{"id": f"d{i}", "text": " ".join(f"w{(i * 7 + j) % 997}" for j in range(40))} for i in range(3000)]
    whole = gzip.compress(b"".join(orjson.dumps(d) + b"\n" for d in docs))
    corpus = tmp_path / "crawl.jsonl.gz"
    corpus.write_bytes(whole[: len(whole) * 2 // 3])
    state, events = tmp_path / "s", tmp_path / "events.jsonl"
    first = cli(
        "dedupe", str(corpus), "--state", str(state), "--events", str(events), "--batch-size", "100", check=False
    )
    assert first.returncode == 2, first.stderr
    return corpus, state, events


def _other_input(tmp_path: Path) -> Path:
    other = tmp_path / "other.jsonl"
    other.write_bytes(orjson.dumps({"id": "x1", "text": "a different page about something else entirely"}) + b"\n")
    return other


def test_a_run_that_would_replace_a_resumable_one_is_refused_until_told(tmp_path: Path) -> None:
    corpus, state, events = _cut_run(tmp_path)
    decided = events.read_bytes()
    unfinished = orjson.loads(cli("stats", "--state", str(state), "--json").stdout)["unfinished_run"]
    assert unfinished["path"] == os.path.realpath(corpus)

    other, other_events = _other_input(tmp_path), tmp_path / "other-events.jsonl"
    refused = cli("dedupe", str(other), "--state", str(state), "--events", str(other_events), check=False)
    assert refused.returncode == 2, refused.stderr
    message = " ".join(refused.stderr.split())
    assert "did not finish" in message and "can still be resumed" in message and "--abandon-unfinished" in message
    assert f"stream-dedupe dedupe {os.path.realpath(corpus)} --state {state} --events {events.resolve()}" in message
    # nothing changed: the same checkpoint, the first run's events, no decision of the refused run
    assert orjson.loads(cli("stats", "--state", str(state), "--json").stdout)["unfinished_run"] == unfinished
    assert events.read_bytes() == decided and not other_events.exists()

    # the resume command the message gives resumes it (up to the cut again: the file is still cut)
    again = cli("dedupe", str(corpus), "--state", str(state), "--events", str(events), check=False)
    assert again.returncode == 2 and "cannot read input" in again.stderr, again.stderr
    assert "did not finish" not in again.stderr  # not refused: resumed, and stopped at the cut again

    told = cli("dedupe", str(other), "--state", str(state), "--events", str(other_events), "--abandon-unfinished")
    assert "warning" in told.stderr and "can no longer be resumed" in " ".join(told.stderr.split())
    assert [e["event"] for e in jsonl(other_events) if e.get("id") == "x1"] == ["new"]
    assert orjson.loads(cli("stats", "--state", str(state), "--json").stdout)["unfinished_run"] is None
    assert events.read_bytes() == decided  # the first run's events are kept


def test_a_run_that_cannot_be_resumed_any_more_is_replaced_with_a_warning(tmp_path: Path) -> None:
    corpus, state, events = _cut_run(tmp_path)
    corpus.write_bytes(corpus.read_bytes() + b"more")  # the input changed: that run cannot be resumed
    other = _other_input(tmp_path)
    replaced = cli("dedupe", str(other), "--state", str(state), "--events", str(tmp_path / "other-events.jsonl"))
    text = " ".join(replaced.stderr.split())
    assert "warning" in text and "can no longer be resumed" in text and f"Its events stay in {events.resolve()}" in text


def test_a_run_into_the_events_file_moved_away_does_not_say_the_events_stay_there(tmp_path: Path) -> None:
    corpus, state, events = _cut_run(tmp_path)
    corpus.write_bytes(corpus.read_bytes() + b"more")  # that run cannot be resumed
    events.rename(tmp_path / "kept.jsonl")  # as the error advised
    replaced = cli("dedupe", str(_other_input(tmp_path)), "--state", str(state), "--events", str(events))
    text = " ".join(replaced.stderr.split())
    assert "can no longer be resumed" in text and "Its events stay in" not in text, text
    assert f"This run writes its own events to {events.resolve()}" in text


def test_an_output_never_clobbers_an_input_and_a_directory_is_no_output(tmp_path: Path) -> None:
    sample = Path(__file__).resolve().parents[1] / "examples" / "crawl-sample.jsonl"
    corpus = tmp_path / "in.jsonl"
    corpus.write_bytes(sample.read_bytes())
    state = tmp_path / "s"
    cases = {
        ("--events", str(corpus)): "is the input",
        ("--deduped", str(tmp_path / "." / "in.jsonl")): "is the input",
        ("--events", str(tmp_path)): "is a directory",
        ("--deduped", str(tmp_path)): "is a directory",
    }
    for (flag, path), expected in cases.items():
        result = cli("dedupe", str(corpus), "--state", str(state), flag, path, check=False)
        assert result.returncode == 2 and expected in result.stderr, (flag, path, result.stderr)
        assert "Traceback" not in result.stderr
    same = cli(
        "dedupe",
        str(corpus),
        "--state",
        str(state),
        "--events",
        str(tmp_path / "o"),
        "--deduped",
        str(tmp_path / "o"),
        check=False,
    )
    assert same.returncode == 2 and "are the same file" in same.stderr
    both = cli("dedupe", str(corpus), "--state", str(state), "--events", "-", "--deduped", "-", check=False)
    assert both.returncode == 2 and "both write to standard output" in both.stderr
    assert corpus.read_bytes() == sample.read_bytes() and not state.exists()  # nothing read, written or created
    for command in (["clusters", "-o"], ["stats", "--prometheus"]):
        result = cli(*command[:1], "--state", str(state), *command[1:], str(tmp_path), check=False)
        assert result.returncode == 2 and "is a directory" in result.stderr, result.stderr


def test_the_deduped_set_can_go_to_standard_output(tmp_path: Path) -> None:
    sample = Path(__file__).resolve().parents[1] / "examples" / "crawl-sample.jsonl"
    to_file, to_stdout = tmp_path / "deduped.jsonl", tmp_path / "s2"
    cli("dedupe", str(sample), "--state", str(tmp_path / "s1"), "--deduped", str(to_file), "--no-progress")
    piped = cli("dedupe", str(sample), "--state", str(to_stdout), "--deduped", "-", "--no-progress")
    assert piped.stdout.encode() == to_file.read_bytes() and len(piped.stdout.splitlines()) == 291
    assert not (Path.cwd() / "-").exists()


def test_the_summary_counts_deletions_so_that_the_rows_add_up(tmp_path: Path) -> None:
    corpus = tmp_path / "in.jsonl"
    lines = [
        {"id": "a", "text": "one two three four five six seven eight nine ten eleven twelve"},
        {"id": "a", "deleted": True},
        {"id": "never-seen", "deleted": True},
        {"id": "b", "text": "x", "deleted": "yes"},
    ]
    corpus.write_bytes(b"".join(orjson.dumps(d) + b"\n" for d in lines))
    run = cli("dedupe", str(corpus), "--state", str(tmp_path / "s"), "--no-progress")
    rows = dict(line.strip().rsplit(None, 1) for line in run.stderr.splitlines() if line.startswith("  "))
    assert (rows["input lines"], rows["new (entered the index)"], rows["deleted"], rows["invalid"]) == (
        "4",
        "1",
        "2",
        "1",
    )


def test_bzip2_and_xz_inputs_are_read_and_zstd_or_zip_are_refused_with_the_fix(tmp_path: Path) -> None:
    import bz2
    import lzma

    sample = Path(__file__).resolve().parents[1] / "examples" / "crawl-sample.jsonl"
    plain_events = tmp_path / "plain.jsonl"
    cli("dedupe", str(sample), "--state", str(tmp_path / "p"), "--events", str(plain_events), "--no-progress")
    expected = [{k: v for k, v in e.items() if k != "file"} for e in jsonl(plain_events)]
    for name, packed in (
        ("c.jsonl.bz2", bz2.compress(sample.read_bytes())),
        ("c.data", lzma.compress(sample.read_bytes())),
    ):
        path, events = tmp_path / name, tmp_path / f"{name}.events"
        path.write_bytes(packed)  # the content decides, not the name
        cli(
            "dedupe",
            str(path),
            "--state",
            str(tmp_path / f"s-{name}"),
            "--events",
            str(events),
            "--no-progress",
        )
        assert [{k: v for k, v in e.items() if k != "file"} for e in jsonl(events)] == expected, name
    for magic, name in ((b"\x28\xb5\x2f\xfd", "zstd"), (b"PK\x03\x04", "zip")):
        path = tmp_path / f"c.{name}"
        path.write_bytes(magic + b"\x00" * 64)
        refused = cli("dedupe", str(path), "--state", str(tmp_path / f"s-{name}"), check=False)
        assert (
            refused.returncode == 2
            and f"is a {name} file" in refused.stderr
            and "| stream-dedupe dedupe -" in refused.stderr
        )
        assert not (tmp_path / f"s-{name}").exists()


def test_a_file_whose_every_line_is_invalid_gets_a_warning(tmp_path: Path) -> None:
    noise = tmp_path / "noise.bin"
    noise.write_bytes(bytes(range(256)) * 40)
    run = cli(
        "dedupe", str(noise), "--state", str(tmp_path / "s"), "--events", str(tmp_path / "e.jsonl"), "--no-progress"
    )
    events = jsonl(tmp_path / "e.jsonl")
    assert events and all(e["event"] == "invalid" for e in events)
    assert "every one of the" in run.stderr and "is the input JSON" in " ".join(run.stderr.split())


def test_a_state_that_cannot_be_written_is_refused_with_the_way_out(tmp_path: Path, monkeypatch: Any) -> None:
    """rocksdict writes a file at every open: a read-only mount gets a message, not 'os error 30'.

    (Tests run as root and cannot mount; rocksdict's own error on such a mount, as it raised it on
    a read-only bind mount here, stands in for it.)
    """
    import pytest

    from stream_dedupe import cli_support
    from stream_dedupe.errors import StateError
    from stream_dedupe.storage import rocks

    sample = Path(__file__).resolve().parents[1] / "examples" / "crawl-sample.jsonl"
    state = tmp_path / "s"
    cli("dedupe", str(sample), "--state", str(state), "--no-progress")

    def read_only(*args: Any, **kwargs: Any) -> Any:
        raise Exception("Read-only file system (os error 30)")

    monkeypatch.setattr(rocks, "Rdict", read_only)
    for open_ in (lambda: cli_support.open_for_reading(state), lambda: rocks.RocksStore(state, reader=True)):
        with pytest.raises(StateError, match=r"is not writable .*copy the state to a writable directory"):
            open_()
    with pytest.raises(StateError, match=r"cannot create state directory .*give --state a directory this user can"):
        rocks.RocksStore(tmp_path / "new")  # no state there yet: nothing to copy


def test_a_directory_given_as_input_or_a_bad_pattern_is_named_with_the_fix(tmp_path: Path) -> None:
    folder = tmp_path / "crawl"
    folder.mkdir()
    result = cli("dedupe", str(folder), "--state", str(tmp_path / "s"), check=False)
    assert result.returncode == 2 and f"{folder} is a directory: pass its files" in result.stderr
    other = _other_input(tmp_path)
    bad = cli("dedupe", str(other), "--state", str(tmp_path / "s"), "--strip-pattern", "(", check=False)
    assert bad.returncode == 2 and "in strip_patterns (--strip-pattern)" in " ".join(bad.stderr.split())
