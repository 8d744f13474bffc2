"""Warm start: the engine's in-memory indexes, saved when a run ends, instead of rebuilt at the next open.

Opening a state rebuilds what the engine holds in memory from everything stored: the LSH band
tables from every signature (:func:`~stream_dedupe.core.rebuild.rebuild_index`), and learned
boilerplate's learned lines and key filter from every line count. That is a scan of the state:
2-6 s for 150,000 documents, before the first new document is read (BENCHMARKS.md, "Reopening
a state"). The command line saves these structures as arrays when a run ends
(:func:`engine_arrays`) and gives them to the next engine over the same state
(``DedupeEngine(warm=...)``), which takes them only when they were saved by an engine with the
same parameters (:func:`warm_key`); the shell checks that the state is exactly the one they were
saved from (:mod:`stream_dedupe.warm_file`), so the decisions are the ones a rebuild gives.

Pure: arrays in, indexes out; where they are kept is the shell's business.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import orjson

from stream_dedupe.config import DedupeParams, RuntimeLimits
from stream_dedupe.core.boilerplate import BoilerplateLearner
from stream_dedupe.core.keyfilter import KeyFilter
from stream_dedupe.core.lshindex import LshIndex

#: Version of the arrays' layout; another version is not loaded (the state is scanned instead).
WARM_FORMAT = 2  # 2: the learned lines' count per source
_LSH = "lsh."
_BOILERPLATE = "boilerplate."


@dataclass(frozen=True)
class WarmStart:
    """Indexes restored from saved arrays.

    Attributes:
        lsh: The band tables and their ids.
        boilerplate: The learned keys, the key filter and the learned lines' count per source
            (None when learning is off).

    """

    lsh: LshIndex
    boilerplate: tuple[set[bytes], KeyFilter, Mapping[str, int]] | None


def warm_key(params: DedupeParams, limits: RuntimeLimits) -> str:
    """What the saved arrays depend on besides the state: the format, the parameters and the bucket cap."""
    key = {"format": WARM_FORMAT, "params": params.to_state(), "bucket_cap": limits.max_bucket_size}
    return orjson.dumps(key, option=orjson.OPT_SORT_KEYS).decode()


def engine_arrays(
    lsh: LshIndex, learner: BoilerplateLearner | None, params: DedupeParams, limits: RuntimeLimits
) -> dict[str, np.ndarray] | None:
    """The arrays :func:`restore` takes back (``key``: :func:`warm_key`), or None if they cannot be saved."""
    arrays = {_LSH + name: value for name, value in lsh.to_arrays().items()}
    if learner is not None:
        learned = learner.to_arrays()
        if learned is None:
            return None
        arrays.update({_BOILERPLATE + name: value for name, value in learned.items()})
    arrays["key"] = np.array(warm_key(params, limits))
    return arrays


def restore(arrays: Mapping[str, np.ndarray], params: DedupeParams, limits: RuntimeLimits) -> WarmStart | None:
    """The indexes of :func:`engine_arrays`' arrays; None if they were saved with other settings or do not fit."""
    try:
        if str(arrays["key"]) != warm_key(params, limits):
            return None
        lsh = LshIndex.from_arrays(
            params.bands,
            params.rows,
            limits.max_bucket_size,
            {name[len(_LSH) :]: value for name, value in arrays.items() if name.startswith(_LSH)},
        )
        learner = None
        if params.boilerplate.learn:
            part = {name[len(_BOILERPLATE) :]: value for name, value in arrays.items() if name.startswith(_BOILERPLATE)}
            learned = set(np.ascontiguousarray(part["learned"], dtype="<u8").view("V8").tolist())
            by_source = orjson.loads(str(part["learned_by_source"]))
            if not isinstance(by_source, dict) or sum(by_source.values()) != len(learned):
                return None
            learner = (learned, KeyFilter.from_arrays(part), by_source)
    except (KeyError, ValueError, TypeError, IndexError, orjson.JSONDecodeError):
        return None
    return WarmStart(lsh, learner)
