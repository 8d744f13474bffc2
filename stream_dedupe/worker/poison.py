"""Which errors a stage retries, which it blames on a record (the poison-record policy), which stop it.

* **transient**: the broker is unreachable or slow (retriable Kafka errors, timeouts, socket
  errors): waited out, never counted against a record;
* **record errors**: anything that is not a Kafka error (the engine failing on a record) and the
  broker refusing a record (too large, corrupt): retried, then dead-lettered as ``unprocessable``
  after ``poison_retries`` failures in a row;
* everything else (fenced by a newer decider, not authorized, ...) stops the stage as before:
  retrying cannot help and no record is to blame.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiokafka import errors  # type: ignore[import-untyped]

from stream_dedupe.core.records import Invalid, peek_id
from stream_dedupe.errors import StateMismatchError

log = logging.getLogger("stream_dedupe.worker")

_RECORD_KAFKA_ERRORS = (
    errors.MessageSizeTooLargeError,
    errors.RecordTooLargeError,
    errors.RecordListTooLargeError,
    errors.CorruptRecordException,
    errors.InvalidMessageError,
)


class ChangelogError(RuntimeError):
    """The state's changelog could not be written after retries: no record is to blame."""


def is_transient(exc: BaseException) -> bool:
    """True for a broker outage or a slow broker: retry without blaming a record."""
    if isinstance(exc, errors.KafkaError):
        return bool(getattr(exc, "retriable", False)) or isinstance(exc, errors.KafkaTimeoutError)
    return isinstance(exc, (OSError, asyncio.TimeoutError, TimeoutError))


def is_record_error(exc: BaseException) -> bool:
    """True for an error a record can cause (see the module docstring).

    A state that disagrees with itself or its shards (:class:`~stream_dedupe.errors.StateMismatchError`)
    is no record's fault: dead-lettering records for it wrote the state once more each time.
    """
    if isinstance(exc, errors.KafkaError):
        return isinstance(exc, _RECORD_KAFKA_ERRORS)
    state_level = isinstance(exc, (ChangelogError, StateMismatchError))
    return not is_transient(exc) and isinstance(exc, Exception) and not state_level


async def decide_safely(
    rt: Any,
    messages: list[Any],
    publish: bool,
    decide: Callable[..., Awaitable[None]],
    reset: Callable[[Any], Awaitable[None]],
) -> None:
    """Decide a batch under the poison-record policy (docs/worker.md, "Poison records").

    A broker outage is waited out (retried without limit). An error tied to the records (the
    engine failing on one, an output refused) is retried record by record; a record that fails
    ``poison_retries`` times in a row is dead-lettered as ``unprocessable`` and the stream goes
    on. Other errors (fenced by a new decider, authorization) stop the stage as before.

    Args:
        rt: The worker's :class:`~stream_dedupe.worker.pipeline.Runtime`.
        messages: Index records of the batch.
        publish: False when the outputs are already published (exactly_once replay).
        decide: ``decide(rt, messages, publish, override=None)``: decides and commits a batch.
        reset: ``reset(rt)``: drops what a failed attempt staged.

    """
    attempt = outages = 0
    while True:
        try:
            await decide(rt, messages, publish)
            if rt.decide_waiting is not None:
                rt.decide_waiting = None
                rt.metrics.decide_retrying.set(0)
            return
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if not (is_transient(exc) or is_record_error(exc)):
                raise
            await reset(rt)
            if is_transient(exc):  # reported on /readyz until a batch is decided
                since = rt.decide_waiting[0] if rt.decide_waiting is not None else time.monotonic()
                rt.decide_waiting = (since, f"{type(exc).__name__}: {str(exc)[:300]}")
            if is_transient(exc) and not rt.gate.is_set():
                rt.decide_waiting = None  # the rebalance is reported as such (and may move the decider)
                rt.metrics.decide_retrying.set(0)
                log.warning("deciding %d records waits for the rebalance (%r)", len(messages), exc)
                return  # the gate closed (a rebalance): the decide loop keeps the records for later
            if is_transient(exc):
                outages += 1
                log.warning("deciding %d records failed (%r): retrying", len(messages), exc)
                await asyncio.sleep(min(2.0**outages, 30.0))  # the broker is down: wait it out
                continue
            attempt += 1
            rt.metrics.poison_retries.inc()
            log.error("deciding %d records failed (%r), attempt %d", len(messages), exc, attempt)
            if len(messages) > 1:
                for m in messages:  # find the record that fails: one at a time
                    await decide_safely(rt, [m], publish, decide, reset)
                return
            if attempt >= rt.settings.poison_retries:
                detail = (
                    f"processing this record failed {attempt} times ({type(exc).__name__}: {str(exc)[:300]}); it was "
                    "dead-lettered so that later records flow"
                )
                log.error("dead-lettering the record at index offset %d: %s", messages[0].offset, detail)
                m = messages[0]
                doc_id = m.key.decode("utf-8", "replace") if m.key else peek_id(m.value or b"")
                await decide(rt, messages, publish, override=Invalid("unprocessable", detail, doc_id))
                return
            await asyncio.sleep(0.2 * attempt)


async def await_settled(rt: Any) -> None:
    """Wait for the previous batch's changelog acknowledgements, sending them again after a failure.

    The store keeps the records of a failed send (and its journal), so a retry sends the whole
    sequence again (idempotent); an outage is waited out, a persistent error stops the stage
    (the journal is re-applied at the next start).
    """
    failures = 0
    while rt.settling is not None:
        try:
            await asyncio.shield(rt.settling)
            rt.settling = None
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            failures += 0 if is_transient(exc) else 1
            if failures >= rt.settings.poison_retries:
                raise ChangelogError(f"the state's changelog cannot be written: {exc!r}") from exc
            log.warning("sending the state's changelog failed (%r): sending it again", exc)
            await asyncio.sleep(1.0)
            rt.settling = asyncio.ensure_future(rt.store.settle(rt.producer))
