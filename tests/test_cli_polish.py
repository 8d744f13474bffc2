"""The CLI as a new user meets it: invalid lines, help defaults, pipes, rejected flags, messages, progress."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from stream_dedupe.config import DedupeParams, mismatch_message
from stream_dedupe.core import aot
from stream_dedupe.storage.rocks import RocksStore

from .test_cli import CLI, cli

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "examples" / "crawl-sample.jsonl"
WIDE = {**os.environ, "COLUMNS": "300"}


def test_eval_counts_invalid_lines_of_the_readme_sample() -> None:
    result = cli("eval", str(SAMPLE), "--json", "--no-datasketch")
    assert "Traceback" not in result.stderr
    assert "skipped 2 line(s) that are not documents (bad-text 1, not-json 1)" in result.stderr
    assert f"first: {SAMPLE}:401:" in result.stderr
    report = orjson.loads(result.stdout)
    assert report["documents"] == 400  # 402 lines: two are not documents
    assert report["skipped_lines"] == 2 and report["skipped_by_reason"] == {"not-json": 1, "bad-text": 1}
    tables = cli("eval", str(SAMPLE), "--no-datasketch")
    assert "skipped 2 line(s)" in tables.stderr and "Traceback" not in tables.stderr


def _help(command: str) -> str:
    result = subprocess.run([*CLI, command, "--help"], capture_output=True, text=True, timeout=120, env=WIDE)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.parametrize("command", ["eval", "tune", "retrieval-eval"])
def test_measuring_a_corpus_without_documents_is_an_error_not_a_perfect_score(tmp_path: Path, command: str) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"\n")
    result = cli(command, str(empty), check=False)
    assert result.returncode == 2 and "holds no documents" in result.stderr, result.stderr
    assert "precision" not in result.stdout


def test_dedupe_and_eval_help_show_their_defaults() -> None:
    dedupe = _help("dedupe")
    for text in (  # a state keeps its index parameters: an existing state's are the defaults
        "Jaccard threshold. [default: the state's, else 0.8]",
        "MinHash permutations. [default: the state's, else 128]",
        "MinHash seed. [default: the state's, else 1]",
        "[default: the state's, else word:3]",
        "exact match only. [default: the state's, else 10]",
        "[default: the state's, else 0.2]",
        "[default: the state's, else 0.01]",
        "[default: the state's, else exact]",
        "[default: 512]",
        "[default: 1048576]",
        "[default: the state's, else 100]",
    ):
        assert text in dedupe, text
    evaluate = _help("eval")
    for text in ("Jaccard threshold. [default: 0.8]", "[default: 128]", "[default: word:3]", "[default: 10]"):
        assert text in evaluate, text
    assert "\\[" not in dedupe + evaluate  # the escapes are consumed, not shown


@pytest.mark.parametrize("command", ["dedupe", "clusters", "explain", "expire", "boilerplate", "stats", "eval", "tune"])
def test_every_option_of_every_command_shows_its_default(command: str) -> None:
    rows = [line for line in _help(command).splitlines() if re.match(r"│\s+(\*\s+)?--", line)]
    assert rows
    for row in rows:
        if "--help" in row:
            continue
        assert "[default:" in row or "[required]" in row, row


def _corpus(tmp_path: Path, n: int = 3000) -> Path:
    path = tmp_path / "in.jsonl"
    lines = (
        orjson.dumps({"id": f"doc-{i:05d}", "text": f"short note number {i}", "updated_at": "2020-01-01T00:00:00Z"})
        for i in range(n)
    )
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def _run_into_closed_pipe(args: list[str]) -> subprocess.CompletedProcess[bytes]:
    """Run with stdout a pipe whose reader has already gone (every write fails with EPIPE)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run([*CLI, *args], stdout=write_end, stderr=subprocess.PIPE, timeout=300)
    finally:
        os.close(write_end)


def test_a_closed_stdout_ends_a_listing_with_exit_0_and_a_dedupe_with_141(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path)
    state = tmp_path / "s"
    cli("dedupe", str(corpus), "--state", str(state), "--no-progress")
    (tmp_path / "a.txt").write_text("one two three four")
    (tmp_path / "b.txt").write_text("one two three five")
    titled = tmp_path / "titled.jsonl"
    titled.write_bytes(
        b"".join(
            orjson.dumps({"id": f"d{i}", "text": f"note {i} on topic {i % 7}", "title": f"N{i}"}) + b"\n"
            for i in range(40)
        )
    )
    commands = [
        ["retrieval-eval", str(titled)],
        ["clusters", "--state", str(state), "--min-size", "1"],
        ["stats", "--state", str(state), "--by-source"],
        ["dedupe", str(corpus), "--state", str(tmp_path / "s2"), "--events", "-", "--no-progress"],
        ["expire", "--state", str(state), "--max-age", "=1d", "--dry-run"],
        ["explain", str(tmp_path / "a.txt"), str(tmp_path / "b.txt")],
        ["eval", str(corpus), "--json", "--no-datasketch"],
        ["eval", str(corpus), "--no-datasketch"],
    ]
    for args in commands:
        result = _run_into_closed_pipe(args)
        stderr = result.stderr.decode()
        # a dedupe did not finish its work: 141, as a shell reports a command a closed pipe ends
        assert result.returncode == (141 if args[0] == "dedupe" else 0), (args, stderr)
        assert "Traceback" not in stderr and "Exception ignored" not in stderr, (args, stderr)
        # a dedupe cut short says so (its state holds only what it committed)
        assert ("reader of standard output went away" in stderr) == (args[0] == "dedupe"), (args, stderr)


def test_clusters_into_head_exits_0_like_unix_tools(tmp_path: Path) -> None:
    state = tmp_path / "s"
    cli("dedupe", str(_corpus(tmp_path)), "--state", str(state), "--no-progress")
    command = " ".join([*CLI, "clusters", "--state", str(state), "--min-size", "1"])
    result = subprocess.run(
        ["bash", "-c", f"set -o pipefail; {command} | head -1"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("\n") == 1 and '"cluster"' in result.stdout
    assert result.stderr == ""


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--threshold", "1.5"], "threshold must be in (0, 1]"),
        (["--num-perm", "7"], "num_perm must be between 16 and 1024"),
        (["--verify", "fuzzy"], "verify must be 'estimate' or 'exact'"),
        (["--lsh-margin", "0.8"], "lsh_margin must be in [0, threshold)"),
        (["--threshold", "0.3", "--lsh-margin", "0.2999999"], "LSH threshold"),
        (["--bands", "3"], "give both bands and rows"),
        (["--shingle", "words"], "cannot parse shingle spec"),
        (["--batch-size", "0"], "batch_size must be between"),
        (["--strip-pattern", "("], "invalid regular expression"),
        (["--events", "/nonexistent-dir/events.jsonl"], "does not exist or is not writable"),
    ],
)
def test_a_rejected_flag_creates_nothing(tmp_path: Path, flags: list[str], message: str) -> None:
    state = tmp_path / "s"
    result = cli("dedupe", str(SAMPLE), "--state", str(state), "--no-progress", *flags, check=False)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr
    assert not state.exists()


def test_read_only_commands_refuse_a_missing_or_empty_state(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    for args in (
        ["clusters"],
        ["boilerplate"],
        ["stats"],
        ["expire", "--max-age", "=1d"],
        ["explain", "a", "b"],
    ):
        result = cli(*args, "--state", str(missing), check=False)
        assert result.returncode == 2 and "does not exist" in result.stderr, (args, result.stderr)
        assert f"stream-dedupe dedupe FILE.jsonl --state {missing}" in result.stderr
        assert not missing.exists()
    (tmp_path / "plain").mkdir()
    plain = cli("clusters", "--state", str(tmp_path / "plain"), check=False)
    assert plain.returncode == 2 and "is not a stream-dedupe state directory" in plain.stderr
    RocksStore(tmp_path / "empty").close()  # what an old failed run left behind
    empty = cli("clusters", "--state", str(tmp_path / "empty"), check=False)
    assert empty.returncode == 2 and "is empty" in empty.stderr and empty.stdout == ""
    # dedupe refuses to turn a directory with other files into a state
    (tmp_path / "plain" / "notes.txt").write_text("mine")
    taken = cli("dedupe", str(SAMPLE), "--state", str(tmp_path / "plain"), "--no-progress", check=False)
    assert taken.returncode == 2 and "is not a stream-dedupe state directory" in taken.stderr
    assert sorted(p.name for p in (tmp_path / "plain").iterdir()) == ["notes.txt"]


def test_a_help_paragraph_wrapped_in_the_source_is_filled_to_the_terminal_width() -> None:
    """``explain``'s docstring has a second paragraph over five source lines: at 80 columns it reads
    as one filled paragraph, not the source's line breaks wrapped again (ragged short lines)."""
    result = subprocess.run(
        [*CLI, "explain", "--help"], capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "80"}
    )
    lines = [line.rstrip() for line in result.stdout.splitlines()]
    start = next(i for i, line in enumerate(lines) if line.strip().startswith("With --state"))
    paragraph = lines[start : lines.index("", start)]
    assert len(paragraph) >= 3 and all(len(line) >= 70 for line in paragraph[:-1]), paragraph
    assert "the title guard, min_tokens and the sources' thresholds" in " ".join(paragraph)


def test_unwrapped_joins_the_lines_of_each_paragraph_but_a_verbatim_one() -> None:
    from stream_dedupe.cli_support import unwrapped

    text = """First line.

        Second paragraph,
        over two lines.

        \b
        kept
        as is
        """
    assert unwrapped(text) == "First line.\n\nSecond paragraph, over two lines.\n\n\b\nkept\nas is"


def test_every_command_takes_dash_h_for_its_help() -> None:
    for command in ([], ["dedupe"], ["stats"], ["worker"], ["produce"]):
        short, long = cli(*command, "-h"), cli(*command, "--help")
        assert short.returncode == 0 and short.stdout == long.stdout and " Usage: " in short.stdout


def test_clusters_help_says_the_state_must_exist() -> None:
    text = _help("clusters")
    assert "created if missing" not in text and "must exist" in text
    assert "created if missing" in _help("dedupe")


def test_a_parameter_mismatch_names_the_flag_the_user_passed(tmp_path: Path) -> None:
    state = tmp_path / "s"
    cli("dedupe", str(SAMPLE), "--state", str(state), "--no-progress")

    def refused(*flags: str) -> str:
        result = cli("dedupe", str(SAMPLE), "--state", str(state), "--no-progress", *flags, check=False)
        assert result.returncode == 2
        return result.stderr

    threshold = refused("--threshold", "0.7")
    assert "threshold: state has 0.8, this run asks for 0.7 (--threshold; the LSH bands and rows follow" in threshold
    assert "bands: state has" not in threshold and "rows: state has" not in threshold
    margin = refused("--lsh-margin", "0.3")
    assert "--lsh-margin 0.3 re-chose them" in margin and "LSH layout: state has" in margin
    assert "bands: state has" not in margin
    assert "(--num-perm" in refused("--num-perm", "64")
    assert "(--verify)" in refused("--verify", "estimate")
    assert "--strip-pattern" in refused("--strip-pattern", "x")
    assert "--bands/--rows" in refused("--bands", "10", "--rows", "5")


def test_mismatch_message_is_none_when_parameters_agree() -> None:
    params = DedupeParams().to_state()
    assert mismatch_message(params, dict(params), 0.2) is None
    other = DedupeParams(seed=2).to_state()
    message = mismatch_message(params, other, 0.2)
    assert message is not None and "seed: state has 1, this run asks for 2 (--seed)" in message


PROGRESS_LINE = re.compile(r"^dedupe: 402 docs, [\d,]+ docs/s, 38 duplicate-of, [\d.]+ s \(100% of the input\)$")


def test_progress_without_a_terminal_is_whole_lines(tmp_path: Path) -> None:
    result = cli("dedupe", str(SAMPLE), "--state", str(tmp_path / "s"))
    lines = result.stderr.splitlines()
    assert any(PROGRESS_LINE.match(line) for line in lines), result.stderr
    assert "━" not in result.stderr  # no bar, so nothing to wrap
    assert not set("┌│├└") & set(result.stderr)  # the summary is plain text, not a table drawn for 80 columns
    summary = lines[lines.index("stream-dedupe summary") + 1 :]
    rows = dict(match.groups() for line in summary if (match := re.match(r"^  (.+?)  +(\S+)$", line)))
    assert len(rows) == len(summary) == 23, summary  # every line after the title is one row: what, value
    assert rows["input lines"] == "402" and rows["invalid"] == "2" and rows["  of which exact"].isdigit()
    assert rows["deleted"] == "0"
    assert rows["representatives (the deduped set)"] == "291" and rows["dropped rate"].endswith("%")
    # the sample is small: numba is never imported; the ahead-of-time module is used when `make` built it
    built = (aot.cache_root() / aot.build_key() / "manifest.json").exists()
    expected_kernels = "ahead-of-time" if built else "pure"
    assert rows["kernels (ahead-of-time, numba or pure)"] == expected_kernels
    assert len({len(line) for line in summary}) == 1  # values aligned on the right
    for line in lines[: -len(summary) - 1]:  # nothing else: a wrapped line would leave a fragment here
        assert PROGRESS_LINE.match(line) or "compil" in line, line


def test_progress_on_a_terminal_is_a_bar(tmp_path: Path) -> None:
    controller, terminal = pty.openpty()
    proc = subprocess.Popen(
        [*CLI, "dedupe", str(SAMPLE), "--state", str(tmp_path / "s")],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=terminal,
        env={**os.environ, "COLUMNS": "160", "TERM": "xterm"},
    )
    os.close(terminal)
    output = b""
    while True:
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # the terminal closed: the process is done
            break
        if not chunk:
            break
        output += chunk
    os.close(controller)
    assert proc.wait(timeout=300) == 0
    text = output.decode(errors="replace")
    assert "━" in text and "docs/s" in text and "stream-dedupe summary" in text
    assert "┌" in text and "│ input lines" in text  # a terminal still gets rich's table
    assert not PROGRESS_LINE.search(text)


def test_first_run_says_it_compiles_the_kernels_and_the_second_loads_them(tmp_path: Path) -> None:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba-cache")}  # an empty cache: a fresh install
    env["STREAM_DEDUPE_JIT"] = "on"  # the sample is small enough for the pure kernels: ask for numba

    def run(state: str) -> str:
        result = subprocess.run(
            [*CLI, "dedupe", str(SAMPLE), "--state", str(tmp_path / state)],
            capture_output=True,
            text=True,
            timeout=600,
            env=env,
        )
        assert result.returncode == 0, result.stderr
        return result.stderr

    first = run("s1")
    assert "compiling the numba kernels (first run after an install only" in first
    assert str(tmp_path / "numba-cache") in first and re.search(r"compiled \d+ numba kernels in [\d.]+ s", first)
    second = run("s2")
    assert "compil" not in second
    assert any(PROGRESS_LINE.match(line) for line in second.splitlines())


def test_make_warms_the_kernels_after_installing() -> None:
    makefile = (REPO / "Makefile").read_text()
    recipe = makefile.split("$(KERNELS): $(STAMP)", 1)[1].split("\n\n", 1)[0]  # after the install, before any use
    assert "stream_dedupe.warmup" in recipe
    rules = {line.split(":", 1)[0]: line.split(":", 1)[1].split() for line in makefile.splitlines() if ": " in line}
    for target in ("demo", "test", "bench", "bench-peers", "bench-worker", "bench-scale", "bench-scale-out"):
        assert "$(KERNELS)" in rules[target], target
    # the demo installs the package only; what tests and benchmarks drive comes with the dev extras
    assert "$(DEV)" not in rules["demo"] and all("$(DEV)" in rules[t] for t in ("test", "lint", "bench"))


def test_warmup_module_compiles_into_the_given_cache(tmp_path: Path) -> None:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache")}
    result = subprocess.run(
        [sys.executable, "-m", "stream_dedupe.warmup"], capture_output=True, text=True, timeout=600, env=env
    )
    assert result.returncode == 0, result.stderr
    assert "kernels ready" in result.stdout
    assert list((tmp_path / "cache").rglob("*.nbi"))


def test_a_cluster_bigger_than_the_bucket_cap_keeps_the_representatives_of_a_roomy_run(tmp_path: Path) -> None:
    corpus = tmp_path / "copies.jsonl"
    page = " ".join(f"word{i % 53}x{i}" for i in range(200))
    corpus.write_bytes(b"".join(orjson.dumps({"id": f"c{i}", "text": f"{page} visit {i}"}) + b"\n" for i in range(24)))

    def representatives(name: str, cap: int) -> tuple[str, str]:
        result = cli("dedupe", str(corpus), "--state", str(tmp_path / name), "--max-bucket-size", str(cap))
        rows = dict(re.findall(r"^  (\S.*?)  +(\S+)$", result.stderr, re.M))
        return rows["representatives (the deduped set)"], rows["representatives checked past full buckets"]

    # c10, the first longer copy, arrives after c0-c3 filled the buckets of 4 (README, "Large groups")
    (capped, checked), (roomy, unchecked) = representatives("capped", 4), representatives("roomy", 24)
    assert capped == roomy == "1" and int(checked) > 0 and unchecked == "0"
