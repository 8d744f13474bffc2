"""The decider's engine, built once the tables are recovered (the first batch, or the recovery timer).

:func:`ensure_engine` replays a journaled batch, builds the engine off the event loop, starts the
decide producers, reads the decided offsets from the state, warms the kernels up and starts the
pipeline; a configuration the state refuses ends the process with exit code 2.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import sys
import time
from typing import Any

import faust
import orjson

from stream_dedupe.core.engine import DedupeEngine, stored_params
from stream_dedupe.core.records import parse_document
from stream_dedupe.errors import StreamDedupeError
from stream_dedupe.worker.pipeline import INDEX_OFFSET_KEY, INPUT_OFFSET_PREFIX, Runtime, _new_consumer, start_pipeline
from stream_dedupe.worker.produce import start_worker_producer
from stream_dedupe.worker.replay import plausible_replay, published_until
from stream_dedupe.worker.shard_client import ShardUnavailable
from stream_dedupe.worker.shard_stage import engine_store

log = logging.getLogger("stream_dedupe.worker")


async def ensure_engine(app: faust.App, rt: Runtime, event: Any) -> None:
    """Build the engine once the tables are recovered (first batch or the recovery timer)."""
    async with rt.lock:
        if rt.engine is not None or rt.fatal is not None:
            return
        store = rt.store
        store.bind(event)
        try:
            if store.recover(INDEX_OFFSET_KEY):
                log.warning("re-applied a state batch journaled by a worker that stopped while writing it")
            params = rt.settings.params(stored_params(store))
            # Rebuilding the LSH index reads every signature (seconds per 100k documents): off the
            # event loop, so /healthz and /metrics keep answering (a liveness probe must not kill
            # a worker that is taking over).
            engine_on = await engine_store(rt, _new_consumer)  # with index shards: over them
            await asyncio.get_running_loop().run_in_executor(None, store.open_tables)
            engine = await asyncio.get_running_loop().run_in_executor(
                None, DedupeEngine, params, engine_on, rt.settings.limits()
            )
        except ShardUnavailable as exc:  # a shard is not served yet (starting, or moving): the timer retries
            log.warning("the engine waits for the index shards: %s", exc)
            return
        except StreamDedupeError as exc:
            rt.fatal = exc
            log.critical("cannot start the dedupe engine: %s", exc)
            exit_fatal(exc)
            return
        if rt.producer is None:
            rt.producer = await start_worker_producer(rt.settings, "decide")
        if rt.settings.exactly_once:
            # Starting the transactional producer fences any previous decider and resolves its
            # open transaction; then the group offset says which records are published already.
            rt.txn_producer = await start_worker_producer(rt.settings, "decide", transactional=True)
            rt.replay_until = await published_until(rt.settings)
        await store.settle(rt.producer)
        for key, value in store.items("meta"):
            if key == INDEX_OFFSET_KEY:
                rt.index_offset = int(value)
            elif key.startswith(INPUT_OFFSET_PREFIX):
                topic, _, partition = key[len(INPUT_OFFSET_PREFIX) :].decode().rpartition(":")
                rt.decided[(topic, int(partition))] = int(value)
        if rt.settings.exactly_once:
            rt.replay_until = plausible_replay(rt.settings, rt.replay_until, rt.index_offset)
        warm_up(engine)
        rt.engine = engine
        gc.freeze()  # start-up objects (Faust, the LSH index rebuilt from state) out of the GC's scans
        start_pipeline(app, rt)
        rt.metrics.decider.set(1)
        docs = store.count("docs")
        rt.metrics.state_documents.set(docs)
        log.info(
            "engine ready: %d documents in state, params %s, %s, ready after %.1fs",
            docs,
            engine.params.to_state(),
            rt.settings.processing_guarantee,
            time.monotonic() - rt.started_at,
        )


def warm_up(engine: DedupeEngine) -> None:
    """Run a throwaway engine (in memory, same parameters) over two similar documents.

    The first ``process`` call loads the compiled kernels (numba) and the rest of the lazy
    imports: ~0.3 s that would otherwise stall the first batch of records (and every record
    queued behind it: the p99 latency of a fresh worker).
    """
    from stream_dedupe.core import jit
    from stream_dedupe.storage.memory import MemoryStore

    jit.enable()  # a long-running worker: numba now, not in the middle of its first big batch
    words = " ".join(f"w{i % 97} x{i % 13}" for i in range(200))
    docs = [orjson.dumps({"id": f"warm-up-{i}", "text": words + (" end" * i)}) for i in range(3)]
    try:
        spare = DedupeEngine(engine.params, MemoryStore(), engine.limits)
        decided = spare.process([parse_document(d, 1 << 20) for d in docs])
        spare.canonical_updates(decided)
        spare.commit()
    except Exception:  # a warm-up only: the real engine reports real problems
        log.debug("warm-up failed", exc_info=True)


def exit_fatal(exc: StreamDedupeError) -> None:
    """Exit with code 2 and the error's message, as the CLI does for every StreamDedupeError.

    Nothing was decided (the engine never started), so there is nothing to flush; a Faust
    graceful stop would wait for the agents parked on their first batch.
    """
    sys.stderr.write(f"error: {exc}\n")
    sys.stderr.flush()
    logging.shutdown()
    os._exit(2)
