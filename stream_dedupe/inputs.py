"""Reading JSON-lines input: plain, gzip, bzip2 and xz files and standard input, line by line as bytes."""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
import shlex
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, cast

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
        raise ConfigError("no input given: pass one or more JSONL files (plain, .gz, .bz2 or .xz), or - for stdin")
    for path in paths:
        if path == "-":
            continue
        p = Path(path)
        if p.is_dir():
            raise ConfigError(f"{flag} {path} is a directory: pass its files (e.g. {path}/*.jsonl)")
        if not p.is_file():
            raise ConfigError(f"{flag} {path} does not exist or is not a file")
        if not os.access(p, os.R_OK):
            raise ConfigError(f"{flag} {path} is not readable")
        with open(p, "rb") as head:
            magic = head.read(8)
        for signature, name, tool in _UNREAD_FORMATS:
            if magic.startswith(signature):
                raise ConfigError(
                    f"{flag} {path} is a {name} file, which is not read directly (plain, gzip, bzip2 and xz are): "
                    f"decompress it first, or pipe it in: `{tool} {shlex.quote(path)} | {_invoked()} - ...`"
                )


def _invoked() -> str:
    """``stream-dedupe <command>`` of this process, to pipe an input into (``dedupe`` when it cannot tell)."""
    words = [arg for arg in sys.argv[1:] if not arg.startswith("-")]
    return f"stream-dedupe {words[0] if words else 'dedupe'}"


#: Compressed or archive formats an input may be in that are not read (signature, name, what unpacks it).
_UNREAD_FORMATS = (
    (b"\x28\xb5\x2f\xfd", "zstd", "zstd -dc"),
    (b"\x04\x22\x4d\x18", "lz4", "lz4 -dc"),
    (b"PK\x03\x04", "zip", "unzip -p"),
    (b"7z\xbc\xaf\x27\x1c", "7-Zip", "7z x -so"),
)


#: Compressed formats read as such, by their signature (the file name does not matter).
_READ_FORMATS: tuple[tuple[bytes, Callable[[BinaryIO], object]], ...] = (
    (b"\x1f\x8b", lambda raw: gzip.GzipFile(fileobj=raw)),
    (b"BZh", bz2.BZ2File),
    (b"\xfd7zXZ\x00", lzma.LZMAFile),
)


def _decompressing(raw: BinaryIO, magic: bytes) -> BinaryIO | None:
    """A reader of the decompressed bytes when ``magic`` is that of gzip, bzip2 or xz (the name does not matter)."""
    for signature, opener in _READ_FORMATS:
        if magic.startswith(signature):
            return cast(BinaryIO, opener(raw))
    return None


def is_compressed(path: str) -> bool:
    """Whether an input file is gzip, bzip2 or xz compressed (its bytes on disk say less than its text)."""
    with open(path, "rb") as head:
        magic = head.read(6)
    return any(magic.startswith(signature) for signature, _ in _READ_FORMATS)


def read_whole(path: str) -> bytes:
    """The bytes of a file, decompressed when it is gzip, bzip2 or xz (as :func:`read_lines` reads it)."""
    with open(path, "rb") as raw:
        magic = raw.read(6)
        raw.seek(0)
        reader = _decompressing(raw, magic)
        return (reader or raw).read()


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
        magic = raw_file.peek(6)[:6] if hasattr(raw_file, "peek") else b""
        unpacked = _decompressing(raw_file, magic)
        compressed = unpacked is not None
        stream: BinaryIO = unpacked if unpacked is not None else raw_file
        # Positions (for progress bars) without a syscall per line: counted for plain files,
        # asked of the compressed file every 256 lines for gzip, bzip2 and xz.
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
    except (OSError, EOFError, lzma.LZMAError) as exc:
        after = f" after line {number:,}" if number else ""
        message = f"cannot read input {path}{after}: {exc} (is it a complete .jsonl, .gz, .bz2 or .xz file?)"
        raise InputReadError(message, path, number) from exc
    finally:
        if path != "-":
            raw_file.close()
