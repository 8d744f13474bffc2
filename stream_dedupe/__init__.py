"""stream-dedupe: near-duplicate removal for document ingestion streams.

The Python API (docs/api.md)::

    from stream_dedupe import Deduper

    with Deduper.open("state/") as dd:
        decision = dd.add({"id": "a", "text": "..."})

Its names are imported on first use, so that the command line starts without the engine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from stream_dedupe.api import Deduper
    from stream_dedupe.api_types import Cluster, Decision, Match, QueryResult
    from stream_dedupe.errors import ConfigError, StateError, StateMismatchError, StreamDedupeError
    from stream_dedupe.state_stats import SourceStats, StateStats

__all__ = [
    "Cluster",
    "ConfigError",
    "Decision",
    "Deduper",
    "Match",
    "QueryResult",
    "SourceStats",
    "StateError",
    "StateMismatchError",
    "StateStats",
    "StreamDedupeError",
    "__version__",
]

_LAZY = {
    "Deduper": "stream_dedupe.api",
    "Cluster": "stream_dedupe.api_types",
    "Decision": "stream_dedupe.api_types",
    "Match": "stream_dedupe.api_types",
    "QueryResult": "stream_dedupe.api_types",
    "SourceStats": "stream_dedupe.state_stats",
    "StateStats": "stream_dedupe.state_stats",
    "ConfigError": "stream_dedupe.errors",
    "StateError": "stream_dedupe.errors",
    "StateMismatchError": "stream_dedupe.errors",
    "StreamDedupeError": "stream_dedupe.errors",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'stream_dedupe' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
