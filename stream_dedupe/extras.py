"""Optional dependencies: what a command needs beyond the worker's runtime, and how to get it.

The runtime (``pip install stream-dedupe``, the container image) carries what the worker and the
embedded commands need. The quality tools' extra dependencies come with
``pip install 'stream-dedupe[tools]'`` (``dev`` includes them).
"""

from __future__ import annotations

import importlib

from stream_dedupe.errors import StreamDedupeError

#: Importable module -> the extra that installs it.
TOOL_MODULES = {"matplotlib": "tools"}


class MissingDependencyError(StreamDedupeError):
    """A command needs a package of an optional extra that is not installed."""


def require(command: str, *modules: str) -> None:
    """Check that ``modules`` can be imported before ``command`` does any work.

    Raises:
        MissingDependencyError: naming the command, the missing packages and the install command.

    """
    missing = []
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(module)
    if missing:
        extras = sorted({TOOL_MODULES.get(m, "tools") for m in missing})
        raise MissingDependencyError(
            f"`stream-dedupe {command}` needs {', '.join(missing)}, which the runtime install leaves out: "
            f"pip install 'stream-dedupe[{','.join(extras)}]'"
        )
