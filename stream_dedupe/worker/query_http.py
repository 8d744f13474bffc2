"""The worker's read-only ``POST /query`` endpoint: what the decide stage would answer, writing nothing.

Off by default; ``query_bind`` (``--query-bind HOST:PORT``) turns it on, on a port of its own
(never the web port that serves ``/metrics``). Served by aiohttp on the worker's event loop:

- ``Authorization: Bearer <token>`` when ``query_token_file`` is set (constant-time comparison;
  401 without it or with another token);
- a body larger than ``max_doc_bytes`` is refused with 413 before it is parsed (by its
  ``Content-Length``, else while it is read), one that does not arrive within ``query_timeout``
  seconds with 408; more than ``query_max_inflight`` requests at once: 503;
- the body is one document ``{"text", "title"?, "source"?, "id"?, "updated_at"?}`` (``url`` and
  ``metadata`` are accepted and ignored) or a JSON list of at most ``query_max_docs`` of them;
  anything else is 400 with a message saying what to send;
- the answer is computed by the Python API's read-only path
  (:class:`stream_dedupe.api_query.QueryPath`: no state write, no LSH insert, no boilerplate
  count, so no changelog record) **under the decide stage's lock**, i.e. between two batches: it
  sees every document decided up to the last committed batch and never a batch half decided.
  A worker that does not decide (another worker owns the index partition), or during a
  rebalance or a changelog restore, answers 503; so does a request that waited
  ``query_timeout`` seconds for the batch in progress.

The answer is the :class:`~stream_dedupe.api_types.QueryResult` as JSON (:func:`result_json`),
a list of them for a list; headers ``X-Stream-Dedupe-Seq`` and ``X-Stream-Dedupe-Index-Offset``
say which committed state answered (the engine's ``seq`` and the last decided index offset).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hmac
import logging
import socket
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson

from stream_dedupe.api_query import QueryPath, input_problem, query_document
from stream_dedupe.api_types import QueryResult
from stream_dedupe.core.records import Invalid, ParseLimits
from stream_dedupe.errors import ConfigError
from stream_dedupe.worker.errors import WorkerConfigError
from stream_dedupe.worker.query_config import read_query_token

if TYPE_CHECKING:
    from aiohttp import web

    from stream_dedupe.worker.pipeline import Runtime

log = logging.getLogger("stream_dedupe.worker.query")

#: Fields a queried document may have (``url`` and ``metadata`` are accepted and ignored).
DOCUMENT_FIELDS = ("id", "text", "title", "source", "updated_at", "url", "metadata")
EXAMPLE = '{"text": "...", "title": "...", "source": "...", "id": "...", "updated_at": "2026-01-31T12:00:00Z"}'


def result_json(result: QueryResult) -> dict[str, Any]:
    """A :class:`QueryResult` as JSON: ``decision`` (without ``seq`` and ``events``), ``matches``, ``duplicate``."""
    decision = {k: v for k, v in dataclasses.asdict(result.decision).items() if k not in ("seq", "events")}
    matches = [dataclasses.asdict(m) for m in result.matches]
    return {"decision": decision, "matches": matches, "duplicate": result.duplicate}


class QueryRejected(Exception):
    """A request answered with an HTTP error: its status and a message saying how to fix it."""

    def __init__(self, status: int, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status, self.message, self.extra = status, message, extra


def parse_request(
    body: bytes, max_docs: int, limits: ParseLimits | None = None
) -> tuple[list[Any], list[str | None], bool, list[Invalid | None]]:
    """The queried documents of a request body, their ids, whether it was one object, and their problems.

    A document's problem is its :func:`~stream_dedupe.api_query.input_problem` under ``limits``
    (None: not checked).

    Raises:
        QueryRejected: 400, with what to send instead.

    """
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise QueryRejected(400, f"the body is not JSON ({exc}): send one document {EXAMPLE} or a list") from None
    single = isinstance(value, dict)
    items = [value] if single else value
    if not isinstance(items, list) or not items:
        raise QueryRejected(400, f"send one JSON document {EXAMPLE} or a non-empty list of them")
    if len(items) > max_docs:
        raise QueryRejected(
            400, f"{len(items)} documents in one request; at most {max_docs} (query_max_docs): split the list"
        )
    docs, ids, problems = [], [], []
    for i, item in enumerate(items):
        where = "the document" if single else f"document {i}"
        if not isinstance(item, dict):
            raise QueryRejected(400, f"{where} is a JSON {type(item).__name__}, not an object like {EXAMPLE}")
        unknown = sorted(set(item) - set(DOCUMENT_FIELDS))
        if unknown:
            raise QueryRejected(400, f"{where} has unknown fields {unknown}: use only {', '.join(DOCUMENT_FIELDS)}")
        doc_id = item.get("id")
        try:
            docs.append(query_document(item, doc_id))
        except ConfigError as exc:
            raise QueryRejected(400, f"{where}: {exc}") from None
        ids.append(doc_id)
        problems.append(None if limits is None else input_problem(item, limits))
    return docs, ids, single, problems


class QueryServer:
    """The ``POST /query`` HTTP server of one worker.

    Args:
        rt: The worker's runtime (engine, decide lock, settings, metrics).
        deciding: True while this worker may decide (owns the index partition, no rebalance or
            restore in progress, engine built): checked before and under the decide lock.

    Raises:
        WorkerConfigError: if the address cannot be bound (in use, not local).

    """

    def __init__(self, rt: Runtime, deciding: Callable[[], bool]) -> None:
        s = rt.settings
        address = s.query_address
        assert address is not None, "the query endpoint is off (query_bind unset)"
        self.rt, self.deciding, self.address = rt, deciding, address
        self.token = None if s.query_token_file is None else read_query_token(s.query_token_file).encode()
        self.limit = s.max_doc_bytes
        self.inflight = 0
        self.sock = _bind(*address)  # now: a port in use stops the worker before it joins the group

    async def serve(self) -> None:
        """Answer queries until cancelled (an ``app.task`` of the worker), then close the port."""
        from aiohttp import web

        app = web.Application(client_max_size=self.limit + 1)
        app.router.add_post("/query", self.handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        try:
            await web.SockSite(runner, self.sock).start()
            host, port = self.address
            log.info("query endpoint: POST http://%s:%d/query (token: %s)", host, port, self.token is not None)
            if self.token is None and not _loopback(host):
                log.warning(
                    "the query endpoint answers on %s:%d without a token: anyone who reaches that address can "
                    "read what the index holds; set STREAM_DEDUPE_QUERY_TOKEN_FILE (--query-token-file) or bind "
                    "it to 127.0.0.1",
                    host,
                    port,
                )
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()

    async def handle(self, request: web.Request) -> web.Response:
        """One ``POST /query`` request (see the module docstring)."""
        from aiohttp import web

        started = time.perf_counter()
        metrics = self.rt.metrics
        try:
            if self.inflight >= self.rt.settings.query_max_inflight:
                raise QueryRejected(503, "too many queries in flight: retry later (query_max_inflight)")
            self.inflight += 1
            try:
                body, headers = await self._answer(request)
            except QueryRejected:
                raise
            except Exception as exc:  # a bug, not the client's fault: say so, keep serving
                log.exception("POST /query failed")
                raise QueryRejected(
                    500, f"the query failed ({type(exc).__name__}: {exc}); see the worker's log"
                ) from exc
            finally:
                self.inflight -= 1
        except QueryRejected as exc:
            metrics.query_rejections.labels(str(exc.status)).inc()
            payload = {"error": exc.message, "status": exc.status, **exc.extra}
            headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else {}
            return web.Response(
                status=exc.status, body=orjson.dumps(payload), content_type="application/json", headers=headers
            )
        metrics.query_seconds.observe(time.perf_counter() - started)
        return web.Response(body=body, content_type="application/json", headers=headers)

    async def _answer(self, request: web.Request) -> tuple[bytes, dict[str, str]]:
        self._authorize(request)
        try:
            async with asyncio.timeout(self.rt.settings.query_timeout):  # a stalled client frees its slot
                body = await self._read(request)
        except TimeoutError:
            raise QueryRejected(
                408, f"the body did not arrive within query_timeout ({self.rt.settings.query_timeout}s): send it whole"
            ) from None
        docs, ids, single, problems = parse_request(
            body, self.rt.settings.query_max_docs, self.rt.settings.parse_limits()
        )
        rt = self.rt
        if not self.deciding():
            raise self._not_deciding()
        try:
            async with asyncio.timeout(rt.settings.query_timeout):
                await rt.deciding.acquire()
        except TimeoutError:
            raise QueryRejected(
                503, f"the decide stage was busy for {rt.settings.query_timeout}s (query_timeout): retry"
            ) from None
        try:  # between two batches: the committed state only
            engine = rt.engine
            if engine is None or not rt.gate.is_set() or not self.deciding():
                raise self._not_deciding()
            results = QueryPath(engine).query(docs, ids, problems)
            seq, offset = engine.seq, rt.index_offset
        finally:
            rt.deciding.release()
        for result in results:
            self.rt.metrics.query_answers.labels(result.decision.kind).inc()
        answers = [result_json(r) for r in results]
        body = orjson.dumps(answers[0] if single else answers)
        return body, {"X-Stream-Dedupe-Seq": str(seq), "X-Stream-Dedupe-Index-Offset": str(offset)}

    def _not_deciding(self) -> QueryRejected:
        """The 503 of a worker that cannot answer now, with its role."""
        if self.rt.engine is None:
            return QueryRejected(
                503,
                "this worker does not decide now (another worker owns the index, or a rebalance or state restore "
                'is in progress): ask the worker whose /readyz says "role": "decide", or retry',
                role="sign",
            )
        rebalancing = "a rebalance or a state restore is in progress: retry in a few seconds"
        return QueryRejected(503, rebalancing, role="decide")

    def _authorize(self, request: web.Request) -> None:
        if self.token is None:
            return
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), self.token):
            raise QueryRejected(401, "send the token of query_token_file as 'Authorization: Bearer <token>'")

    async def _read(self, request: web.Request) -> bytes:
        too_large = f"the body is larger than max_doc_bytes ({self.limit} bytes): send fewer or smaller documents"
        if request.content_length is not None and request.content_length > self.limit:
            raise QueryRejected(413, too_large)
        chunks, size = [], 0
        while chunk := await request.content.read(1 << 16):
            size += len(chunk)
            if size > self.limit:
                raise QueryRejected(413, too_large)
            chunks.append(chunk)
        return b"".join(chunks)


def _loopback(host: str) -> bool:
    """True if ``host`` is a loopback address or name (``localhost``); a name that does not resolve: False."""
    import ipaddress

    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return all(ipaddress.ip_address(info[4][0]).is_loopback for info in infos)


def _bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port``.

    Raises:
        WorkerConfigError: if it cannot be bound.

    """
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        raise WorkerConfigError(
            f"the query endpoint cannot listen on {host}:{port} ({exc.strerror or exc}): free the port or fix "
            "STREAM_DEDUPE_QUERY_BIND / --query-bind"
        ) from exc
    sock.setblocking(False)
    return sock
