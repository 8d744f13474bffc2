"""The compiled kernels' first compilation: detect it, and do it ahead of the first real batch.

Every kernel is a numba function with ``cache=True`` (declared with
:func:`stream_dedupe.core.jit.njit`, so numba is imported only by :func:`~stream_dedupe.core.jit.enable`,
which everything here calls first): numba compiles it on first use and writes
the machine code to its cache (``__pycache__`` beside the source when writable, else
``NUMBA_CACHE_DIR`` or the user cache); later processes load it. :func:`warm` runs the engine on
two tiny documents in memory, so that every kernel of the ``dedupe`` path is compiled or loaded
before the progress starts (``make`` runs it once after installing).
"""

from __future__ import annotations

import os
import time
from types import ModuleType
from typing import Any

from stream_dedupe.config import DedupeParams


def _kernel_modules() -> list[ModuleType]:
    from stream_dedupe.core import bandindex, kernels, lineform, linekeys, lsh, verify

    return [kernels, lsh, bandindex, lineform, linekeys, verify]


def _dispatchers(modules: list[ModuleType] | None = None) -> list[Any]:
    from stream_dedupe.core import jit

    mods = modules or _kernel_modules()
    jit.enable()
    from numba.core.dispatcher import Dispatcher

    found = []
    for module in mods:
        for value in vars(module).values():
            # inlined helpers are compiled into their callers, never cached on their own
            if isinstance(value, Dispatcher) and value.targetoptions.get("inline") != "always":
                found.append(value)
    return found


def _index_path(dispatcher: Any) -> str | None:
    cache_file = getattr(getattr(dispatcher, "_cache", None), "_cache_file", None)
    path = getattr(cache_file, "_index_path", None)
    return path if isinstance(path, str) else None


def uncached_kernels() -> list[str]:
    """The signing kernels with nothing in numba's on-disk cache yet: a first run after an install.

    Only :mod:`stream_dedupe.core.kernels` is looked at: every run uses all of its kernels, while
    some index kernels run only when the index grows (they are compiled then).
    """
    from stream_dedupe.core import kernels

    return [
        d.py_func.__name__ for d in _dispatchers([kernels]) if (path := _index_path(d)) and not os.path.exists(path)
    ]


def compiled_kernels() -> list[str]:
    """The kernels this process compiled (cache misses) rather than loaded from the cache."""
    return [d.py_func.__name__ for d in _dispatchers() if sum(d.stats.cache_misses.values())]


def kernel_cache_dir() -> str:
    """Where numba caches the kernels of this installation."""
    for dispatcher in _dispatchers():
        path = _index_path(dispatcher)
        if path:
            return os.path.dirname(path)
    return os.environ.get("NUMBA_CACHE_DIR", "numba's cache directory")


def warm(params: DedupeParams | None = None) -> float:
    """Compile (or load) every kernel of the dedupe path; return the seconds it took."""
    import orjson

    from stream_dedupe.core import jit
    from stream_dedupe.core.engine import DedupeEngine
    from stream_dedupe.core.records import Deletion, parse_document
    from stream_dedupe.storage.memory import MemoryStore

    started = time.perf_counter()
    jit.enable()
    params = params or DedupeParams()
    text = " ".join(f"warm{i}" for i in range(max(params.min_tokens, 1) * 3))
    pair = (("a", text), ("b", text + " x"))
    records = [parse_document(orjson.dumps({"id": i, "text": t}), 1 << 20) for i, t in pair]
    engine = DedupeEngine(params, MemoryStore())
    engine.process(records)
    engine.process([Deletion("b")])
    engine.commit()
    import numpy as np

    from stream_dedupe.core.bandindex import BandIndex

    BandIndex(2, 2, capacity=2)._grow()  # the rehash kernel runs only when a table grows
    # the capped bulk insert runs only when a state with documents is opened
    BandIndex(2, 2).insert_capped(np.zeros((1, 2), dtype=np.uint64), 0, 4)
    BandIndex(2, 2).bucket_sizes(np.zeros(2, dtype=np.uint64))  # only once a bucket is full
    BandIndex(2, 2).insert_masked(np.zeros((1, 2), dtype=np.uint64), 0, np.zeros((1, 2), dtype=np.uint8))
    from stream_dedupe.core.verify import exact_jaccards

    one = np.arange(2, dtype=np.uint32).tobytes()
    exact_jaccards(np.arange(3, dtype=np.uint32), [one, one])  # runs for three candidates or more only
    from stream_dedupe.core.lineform import ascii_form

    ascii_form("a line learned as boilerplate")  # formed again only when a line is learned
    return time.perf_counter() - started


def main() -> None:
    """``python -m stream_dedupe.warmup``: fill numba's cache, then build the ahead-of-time module.

    A failed ahead-of-time build is a warning (the engine then uses numba's JIT, as without it).
    """
    from stream_dedupe.core import aot, jit
    from stream_dedupe.errors import StreamDedupeError

    jit.enable_numba()  # numba's own cache too: the fallback, and the kernels the module leaves out
    print(f"stream-dedupe kernels ready in {warm():.1f} s ({kernel_cache_dir()})")
    if not aot.enabled_by_env():
        return
    for stale in aot.prune():
        print(f"removed ahead-of-time kernels unused for {aot.STALE_DAYS} days ({stale})")
    if aot.load() is not None:
        print(f"ahead-of-time kernels already built ({aot.cache_root() / aot.build_key()})")
        return
    started = time.perf_counter()
    try:
        path = aot.build()
    except StreamDedupeError as exc:
        print(f"warning: {exc}")
        return
    print(f"ahead-of-time kernels built in {time.perf_counter() - started:.1f} s ({path})")


if __name__ == "__main__":
    main()
