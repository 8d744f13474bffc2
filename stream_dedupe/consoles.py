"""Where the command line writes: rich on a terminal, plain whole lines otherwise.

rich costs ~0.03 s of start-up to import; a run whose stderr is a file or a pipe (CI logs,
``2> log``, a script) does not import it: :class:`PlainConsole` writes the same text.
"""

from __future__ import annotations

import os
import re
import sys
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from rich.console import Console

#: A rich markup tag (``[yellow]``, ``[/]``, ``[bold red]``), as rich's own markup parser finds them.
_TAG = re.compile(r"(?<!\\)\[[a-z#/@][^[]*?]")
#: rich's escape of text that would read as a tag (rich.markup.escape, without importing rich).
_ESCAPE = re.compile(r"(\\*)(\[[a-z#/@][^[]*?])")


class Output(Protocol):
    """What the commands need of their stderr: rich's console, or :class:`PlainConsole`."""

    @property
    def is_terminal(self) -> bool:
        """Whether the output understands escape sequences (a progress bar, colours)."""

    def out(self, *objects: Any, highlight: bool | None = None) -> None:
        """Write text as it is (no markup)."""

    def print(self, *objects: Any) -> None:
        """Write text with rich markup (tags are dropped by :class:`PlainConsole`)."""


class PlainConsole:
    """stderr that is not a terminal: plain lines, rich markup tags removed, nothing wrapped."""

    is_terminal = False

    def out(self, *objects: Any, highlight: bool | None = None) -> None:
        """Write the objects as one line."""
        sys.stderr.write(" ".join(str(o) for o in objects) + "\n")
        sys.stderr.flush()

    def print(self, *objects: Any) -> None:
        """Write the objects as one line, without their markup tags."""
        self.out(*(_TAG.sub("", o).replace("\\[", "[") if isinstance(o, str) else o for o in objects))


def stderr_is_terminal() -> bool:
    """Whether stderr is a terminal, by rich's test (TTY_COMPATIBLE, FORCE_COLOR, else isatty)."""
    compatible = os.environ.get("TTY_COMPATIBLE", "")
    if compatible in ("0", "1"):
        return compatible == "1"
    force = os.environ.get("FORCE_COLOR")
    if force is not None:
        return force != ""
    try:
        return sys.stderr.isatty()
    except ValueError:  # closed
        return False


def stderr_console() -> Output:
    """A rich console on stderr when it is a terminal, else a :class:`PlainConsole`."""
    if not stderr_is_terminal():
        return PlainConsole()
    from rich.console import Console

    console: Console = Console(stderr=True, soft_wrap=True)
    return console


def escape(markup: str) -> str:
    """``rich.markup.escape``: text that rich prints as it is (``[default: 1]`` is not a tag)."""

    def backslashes(match: re.Match[str]) -> str:
        slashes, text = match.groups()
        return f"{slashes}{slashes}\\{text}"

    markup = _ESCAPE.sub(backslashes, markup)
    if markup.endswith("\\") and not markup.endswith("\\\\"):
        return markup + "\\"
    return markup


#: Columns of a table written to a file or a pipe (rich's default there, 80, cut cells short).
PIPE_WIDTH = 200


def stdout_console() -> Console:
    """A rich console on stdout whose reader may go away (``| head``): the command then exits 0.

    rich's default exits 1 on a broken pipe; this one lets the command group handle it like
    every other write to a closed stdout. Written to a file or a pipe, tables are
    :data:`PIPE_WIDTH` columns wide instead of 80, so that their cells are not cut.
    """
    from rich.console import Console

    class StdoutConsole(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True
            raise BrokenPipeError(32, "the reader of stdout has gone")

    console = StdoutConsole()
    if not console.is_terminal:
        console.width = PIPE_WIDTH
    return console
