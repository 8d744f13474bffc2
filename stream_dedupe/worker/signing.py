"""The sign stage's signing: in the ``--jobs`` processes of a :class:`~stream_dedupe.sign_pool.SignPool`, else here.

A signing process that dies (killed, out of memory) costs one batch signed in the worker's own
process, and the pool is started again in the background; a document that cannot be signed is
forwarded unsigned (the decide stage signs it, or dead-letters it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from stream_dedupe.core.signer import Signed, Signer
from stream_dedupe.sign_pool import LIVENESS_SECONDS, SignPool, SignPoolError
from stream_dedupe.worker.metrics import WorkerMetrics
from stream_dedupe.worker.settings import WorkerSettings

log = logging.getLogger("stream_dedupe.worker.sign")


class Signing:
    """Signs a sign stage's documents (see the module docstring).

    Args:
        settings: The worker's settings (``jobs``: the signing processes).
        signer: Signs with the parameters the workers are configured with.
        metrics: The worker's metrics (signing processes, their failures).

    """

    def __init__(self, settings: WorkerSettings, signer: Signer, metrics: WorkerMetrics) -> None:
        self.settings, self.signer, self.metrics = settings, signer, metrics
        #: The signing processes of ``--jobs`` (None: this process signs).
        self.pool: SignPool | None = None
        self._restarting: asyncio.Future[None] | None = None

    async def start(self) -> None:
        """Start the signing processes of ``--jobs`` (in a thread: spawning them takes a second or two)."""
        n = self.settings.sign_processes()
        if n <= 0:
            return
        try:
            self.pool = await asyncio.to_thread(SignPool, n, "spawn", True)
        except Exception:
            log.exception("sign stage: starting %d signing processes failed; signing in this process", n)
            return
        self.metrics.sign_processes.set(n)
        log.info("sign stage: %d signing processes started (pids %s)", n, ", ".join(map(str, self.pool.pids)))

    async def stop(self) -> None:
        """Stop the signing processes (a pool still starting is not waited for)."""
        pool, self.pool = self.pool, None
        if self._restarting is not None:
            # A pool still being started is not waited for: its processes exit with this one
            # (PR_SET_PDEATHSIG and the parent watchdog of sign_pool._init_worker).
            self._restarting.cancel()
        if pool is not None:
            await asyncio.to_thread(pool.close)
        self.metrics.sign_processes.set(0)

    async def _restart(self, broken: SignPool) -> None:
        with contextlib.suppress(Exception):
            broken.abandon()  # not close(): its executor's thread may wait forever on the dead worker
        await self.start()

    async def signatures(self, texts: list[str]) -> list[bytes | None]:
        """Encoded signatures of ``texts`` (None: the decide stage signs that one, or dead-letters it).

        With signing processes (``--jobs``), the batch is split across them and this process
        serves the decide stage and the Kafka clients meanwhile. A process that dies (killed, out of
        memory) costs one batch signed here, and the pool is started again in the background.
        """
        pool = self.pool
        if pool is not None:
            from concurrent.futures.process import BrokenProcessPool

            size = -(-len(texts) // pool.workers)
            try:
                futures = [pool.submit(self.signer, texts[i : i + size]) for i in range(0, len(texts), size)]
                waiting = [asyncio.wrap_future(f) for f in futures]
                _, pending = await asyncio.wait(waiting, timeout=LIVENESS_SECONDS)
                while pending:
                    pool.check()  # a worker killed mid-result leaves its futures pending forever
                    _, pending = await asyncio.wait(pending, timeout=LIVENESS_SECONDS)
                parts = [w.result() for w in waiting]
                return [blob for part in parts for blob in part]
            except (BrokenProcessPool, SignPoolError) as exc:
                self.metrics.sign_pool_failures.inc()
                log.warning("sign stage: a signing process died (%r): this batch is signed here; restarting them", exc)
                self.pool = None
                self._restarting = asyncio.ensure_future(self._restart(pool))
            except Exception:
                log.warning("sign stage: a signing process failed on a batch; signing it here", exc_info=True)
        signer = self.signer
        return [None if signed is None else signer.encode(signed) for signed in self._sign(texts)]

    def _sign(self, texts: list[str]) -> list[Signed | None]:
        """Signatures of ``texts``; one that cannot be made is None (the decide stage signs it, or dead-letters it)."""
        try:
            return list(self.signer.sign(texts))
        except Exception:
            log.exception("sign stage: signing a batch of %d documents failed; signing them one by one", len(texts))
        out: list[Signed | None] = []
        for text in texts:
            try:
                out.append(self.signer.sign([text])[0])
            except Exception:
                out.append(None)
        return out
