"""Fault injection for the worker's recovery tests: ``STREAM_DEDUPE_FAULT=<name>:<n>``.

Never set in production. The tests use it to stop the worker at an exact point of a sequence
(a batch's changelog writes, its commit, its publish), which a kill -9 only hits by chance.
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger("stream_dedupe.worker.faults")

_faults: dict[str, int] = {}


def _exit_pass(name: str) -> int | None:
    """The pass of ``name`` at which ``STREAM_DEDUPE_FAULT`` makes the worker exit, if it names it."""
    fault = os.environ.get("STREAM_DEDUPE_FAULT", "")
    return int(fault.rpartition(":")[2]) if fault.startswith(name + ":") else None


def fault_point(name: str) -> None:
    """Exit (code 86) at the n-th pass here when ``STREAM_DEDUPE_FAULT=<name>:<n>``."""
    n = _exit_pass(name)
    if n is None:
        return
    _faults[name] = _faults.get(name, 0) + 1
    if _faults[name] >= n:
        log.critical("fault injection %s:%d: exiting now", name, n)
        logging.shutdown()
        os._exit(86)


def fault_armed(name: str) -> bool:
    """True when the next :func:`fault_point` of ``name`` exits (the tests: a fault that also changes what is sent)."""
    n = _exit_pass(name)
    return n is not None and _faults.get(name, 0) + 1 >= n
