"""Reading JSON-lines input: plain files, gzip files and standard input, line by line as bytes."""

from __future__ import annotations

import gzip
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from stream_dedupe.errors import ConfigError


@dataclass(frozen=True)
class InputLine:
    """One raw input line.

    Attributes:
        source: The input's name (a path, or ``-``).
        line: 1-based line number within that input.
        raw: The line's bytes without the line ending.
        position: Bytes of the underlying (possibly compressed) file consumed so far.

    """

    source: str
    line: int
    raw: bytes
    position: int


def identity(path: str) -> dict[str, object]:
    """What identifies an input across runs (to resume an interrupted run safely)."""
    if path == "-":
        return {"path": "-"}
    stat = os.stat(path)
    return {"path": os.path.realpath(path), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def total_bytes(paths: list[str]) -> int | None:
    """Sum of the input files' sizes (None when reading standard input)."""
    if "-" in paths:
        return None
    return sum(os.path.getsize(p) for p in paths)


def check_inputs(paths: list[str], flag: str = "input") -> None:
    """Fail early, with a clear message, on inputs that cannot be read.

    Raises:
        ConfigError: on a missing or unreadable input.

    """
    if not paths:
        raise ConfigError("no input given: pass one or more JSONL files (.jsonl or .jsonl.gz), or - for stdin")
    for path in paths:
        if path == "-":
            continue
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"{flag} {path} does not exist or is not a file")
        if not os.access(p, os.R_OK):
            raise ConfigError(f"{flag} {path} is not readable")


_BOM = b"\xef\xbb\xbf"


class InputReadError(ConfigError):
    """An input could not be read to its end (a truncated gzip file, a read error).

    Attributes:
        path: The input.
        line: The last line read from it whole (0: none).

    """

    def __init__(self, message: str, path: str, line: int) -> None:
        super().__init__(message)
        self.path, self.line = path, line


def read_lines(path: str, skip: int = 0) -> Iterator[InputLine]:
    """Yield the lines of one input, skipping the first ``skip`` (already processed) lines."""
    raw_file: BinaryIO = sys.stdin.buffer if path == "-" else open(path, "rb")  # noqa: SIM115
    try:
        magic = raw_file.peek(2)[:2] if hasattr(raw_file, "peek") else b""
        compressed = magic == b"\x1f\x8b"
        stream: BinaryIO = gzip.GzipFile(fileobj=raw_file) if compressed else raw_file  # type: ignore[assignment]
        # Positions (for progress bars) without a syscall per line: counted for plain files,
        # asked of the compressed file every 256 lines for gzip.
        position = number = 0
        for number, line in enumerate(stream, start=1):
            if compressed:
                if number % 256 == 1 and path != "-":
                    position = raw_file.tell()
            else:
                position += len(line)
            if number <= skip:
                continue
            if number == 1 and line.startswith(_BOM):  # a UTF-8 byte order mark (some Windows tools write one)
                line = line[len(_BOM) :]
            yield InputLine(path, number, line.rstrip(b"\r\n"), position)
    except (OSError, EOFError) as exc:
        after = f" after line {number:,}" if number else ""
        message = f"cannot read input {path}{after}: {exc} (is it a complete .jsonl or .jsonl.gz file?)"
        raise InputReadError(message, path, number) from exc
    finally:
        if path != "-":
            raw_file.close()
