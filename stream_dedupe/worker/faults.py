"""Fault injection for the worker's recovery tests: ``STREAM_DEDUPE_FAULT=<name>:<n>``.

Never set in production. The tests use it to stop the worker at an exact point of a sequence
(a batch's changelog writes, its commit, its publish), which a kill -9 only hits by chance.
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger("stream_dedupe.worker.faults")

_faults: dict[str, int] = {}


def fault_point(name: str) -> None:
    """Fault injection for the recovery tests: ``STREAM_DEDUPE_FAULT=<name>:<n>`` exits at the n-th pass.

    Never set in production; the tests use it to die at an exact point of a sequence, which a
    kill -9 only hits by chance.
    """
    fault = os.environ.get("STREAM_DEDUPE_FAULT", "")
    if not fault.startswith(name + ":"):
        return
    _faults[name] = _faults.get(name, 0) + 1
    if _faults[name] >= int(fault.rpartition(":")[2]):
        log.critical("fault injection %s: exiting now", fault)
        logging.shutdown()
        os._exit(86)


def fault_armed(name: str) -> bool:
    """True when the next :func:`fault_point` of ``name`` exits (the tests: a fault that also changes what is sent)."""
    fault = os.environ.get("STREAM_DEDUPE_FAULT", "")
    return fault.startswith(name + ":") and _faults.get(name, 0) + 1 >= int(fault.rpartition(":")[2])
