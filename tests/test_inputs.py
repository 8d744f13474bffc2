from __future__ import annotations

import gzip
import os
from pathlib import Path

import pytest

from stream_dedupe.errors import ConfigError
from stream_dedupe.inputs import check_inputs, identity, read_lines


def test_plain_and_gzip_lines_with_positions_and_skip(tmp_path: Path) -> None:
    data = b'{"id": "a"}\r\n{"id": "b"}\n\n{"id": "c"}'
    plain, packed = tmp_path / "x.jsonl", tmp_path / "x.jsonl.gz"
    plain.write_bytes(data)
    packed.write_bytes(gzip.compress(data))
    for path in (plain, packed):
        lines = list(read_lines(str(path)))
        assert [(x.line, x.raw) for x in lines] == [
            (1, b'{"id": "a"}'),
            (2, b'{"id": "b"}'),
            (3, b""),
            (4, b'{"id": "c"}'),
        ]
        assert [x.line for x in read_lines(str(path), skip=2)] == [3, 4]
    positions = [x.position for x in read_lines(str(plain))]
    assert positions == sorted(positions) and positions[-1] == len(data)


def test_identity_and_checks(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_bytes(b"{}\n")
    first = identity(str(path))
    path.write_bytes(b"{}\n{}\n")
    assert identity(str(path)) != first  # a changed file is not resumed
    with pytest.raises(ConfigError, match="no input"):
        check_inputs([])
    with pytest.raises(ConfigError, match="does not exist"):
        check_inputs([str(tmp_path / "missing.jsonl")])
    truncated = tmp_path / "t.jsonl.gz"
    body = b"".join(b'{"id": "%d", "text": "%s"}\n' % (i, bytes(range(97, 123)) * (i % 7)) for i in range(3000))
    whole = gzip.compress(body)
    truncated.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(ConfigError, match="complete"):
        list(read_lines(str(truncated)))


@pytest.mark.parametrize("compressed", [False, True])
def test_progress_reaches_the_whole_input_over_several_files(tmp_path: Path, compressed: bool) -> None:
    """Positions add up over the input files (not per file), and reach the end of a gzip file's last lines."""
    import orjson

    from stream_dedupe.config import DedupeParams
    from stream_dedupe.core.engine import DedupeEngine
    from stream_dedupe.embedded import run
    from stream_dedupe.inputs import total_bytes
    from stream_dedupe.storage.memory import MemoryStore

    paths = []
    for part in range(2):
        data = b"".join(
            orjson.dumps({"id": f"{part}-{i}", "text": f"words of page {part} {i}"}) + b"\n" for i in range(700)
        )
        path = tmp_path / (f"p{part}.jsonl.gz" if compressed else f"p{part}.jsonl")
        path.write_bytes(gzip.compress(data) if compressed else data)
        paths.append(str(path))
    deletions = tmp_path / "gone.txt"
    deletions.write_text("0-1\n1-2\n")
    positions: list[int] = []
    run(
        DedupeEngine(DedupeParams(), MemoryStore()),
        paths,
        None,
        100,
        1 << 20,
        lambda lines, position, counters: positions.append(position),
        [str(deletions)],
    )
    total = total_bytes(paths)
    assert positions == sorted(positions) and positions[-1] == total
    first = Path(paths[0]).stat().st_size  # after the first file's 7 batches: its size, not more
    assert positions[5] <= positions[7] == first < positions[8] and len(positions) == 17


def test_a_byte_order_mark_before_the_first_line_is_not_part_of_it(tmp_path: Path) -> None:
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"id": "a", "text": "x"}\n\xef\xbb\xbf{"id": "b"}\n')
    lines = [item.raw for item in read_lines(str(path))]
    assert lines == [b'{"id": "a", "text": "x"}', b'\xef\xbb\xbf{"id": "b"}']  # only the file's first line


def _whole_lines(path: Path) -> int:
    """Lines of a truncated gzip file that read whole before the error."""
    from stream_dedupe.inputs import InputReadError

    read = 0
    with pytest.raises(InputReadError) as caught:
        for read, _ in enumerate(read_lines(str(path)), start=1):  # noqa: B007 - counted
            pass
    assert caught.value.line == read and f"after line {read:,}" in str(caught.value)
    return read


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_truncated_input_decides_every_whole_line_then_says_how_to_go_on(tmp_path: Path, jobs: str) -> None:
    """A gzip file cut short (a download that stopped): the lines before the cut are decided and
    committed, in-process or through the signing pool that reads batches ahead; once the file is
    whole, the run it names goes on."""
    import subprocess
    import sys

    import orjson

    docs = [{"id": f"d{i}", "text": " ".join(f"w{(i * 7 + j) % 997}" for j in range(40))} for i in range(3000)]
    whole = gzip.compress(b"".join(orjson.dumps(d) + b"\n" for d in docs))
    corpus = tmp_path / "crawl.jsonl.gz"
    corpus.write_bytes(whole[: len(whole) * 2 // 3])
    read = _whole_lines(corpus)
    assert 500 < read < 3000 and read % 100  # the cut falls inside a batch of 100
    state, events = tmp_path / "state", tmp_path / "events.jsonl"
    cli = [sys.executable, "-m", "stream_dedupe", "dedupe", str(corpus), "--state", str(state), "--no-progress"]
    cli += ["--batch-size", "100", "--jobs", jobs]
    env = {**os.environ, "STREAM_DEDUPE_POOL_BYTES": "1"}  # a pool even for this small input
    first = subprocess.run([*cli, "--events", str(events)], capture_output=True, text=True, env=env, timeout=300)
    assert first.returncode == 2, first.stderr
    assert f"cannot read input {corpus} after line {read:,}" in first.stderr
    assert f"decided and committed; their events are in {events}" in first.stderr
    decided = [orjson.loads(line) for line in events.read_bytes().splitlines()]
    assert [e["id"] for e in decided if e["event"] in ("new", "duplicate-of")] == [f"d{i}" for i in range(read)]

    corpus.write_bytes(whole)  # the download completed
    again = subprocess.run([*cli, "--events", str(events)], capture_output=True, text=True, env=env, timeout=300)
    assert again.returncode == 2 and "changed since (size or modification time)" in again.stderr, again.stderr
    rest = tmp_path / "rest.jsonl"
    done = subprocess.run([*cli, "--events", str(rest)], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    outcomes = [orjson.loads(line) for line in rest.read_bytes().splitlines()]
    kinds = {e["id"]: e["event"] for e in outcomes if e["event"] in ("new", "duplicate-of", "unchanged")}
    assert [kinds[f"d{i}"] for i in range(read)] == ["unchanged"] * read
    assert all(kinds[f"d{i}"] in ("new", "duplicate-of") for i in range(read, 3000))


def test_compression_is_told_by_the_content_not_the_name(tmp_path: Path) -> None:
    import bz2
    import lzma

    from stream_dedupe.inputs import is_compressed

    text = b'{"id": "a", "text": "x"}\n'
    for name, data in (("a.data", gzip.compress(text)), ("b.jsonl", bz2.compress(text)), ("c", lzma.compress(text))):
        (tmp_path / name).write_bytes(data)
        assert is_compressed(str(tmp_path / name)), name
    (tmp_path / "plain.jsonl.gz").write_bytes(text)  # a name that lies
    assert not is_compressed(str(tmp_path / "plain.jsonl.gz"))


def test_a_damaged_gzip_input_is_told_from_a_cut_one_with_what_to_check(tmp_path: Path) -> None:
    """gzip checks a member's CRC at its end, so the lines of a damaged part were read before the error."""
    import subprocess
    import sys

    import orjson

    docs = [{"id": f"d{i}", "text": " ".join(f"w{(i * 7 + j) % 997}" for j in range(40))} for i in range(3000)]
    damaged = bytearray(gzip.compress(b"".join(orjson.dumps(d) + b"\n" for d in docs)))
    middle = len(damaged) // 2
    damaged[middle : middle + 4] = b"\0\0\0\0"
    corpus = tmp_path / "crawl.jsonl.gz"
    corpus.write_bytes(bytes(damaged))
    cli = [sys.executable, "-m", "stream_dedupe", "dedupe", str(corpus), "--state", str(tmp_path / "s")]
    result = subprocess.run([*cli, "--no-progress", "--jobs", "1"], capture_output=True, text=True, timeout=300)
    said = " ".join(result.stderr.split())
    assert result.returncode == 2 and "CRC check failed" in said, said
    assert "The file is damaged, not cut short" in said and "--deletions" in said and "--abandon-unfinished" in said
