"""Integration tests on a real Apache Kafka broker (KRaft, 127.0.0.1), started by tools/kafka/kafka.sh.

The broker is session-scoped, on its own port and run dir; if it cannot start the session fails
(never skips). Workers run as subprocesses (``python -m stream_dedupe worker``) with unique app
ids and topics per test, a temporary state dir and a free web port.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

REPO = Path(__file__).resolve().parents[2]
SHARED_DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
KAFKA_SH = REPO / "tools" / "kafka" / "kafka.sh"
KAFKA_ENV = {
    "KAFKA_PORT": os.environ.get("SD_TEST_KAFKA_PORT", "19192"),
    "KAFKA_CONTROLLER_PORT": os.environ.get("SD_TEST_KAFKA_CONTROLLER_PORT", "19193"),
    "KAFKA_RUN_DIR": os.environ.get("SD_TEST_KAFKA_RUN_DIR", "/tmp/stream-dedupe-kafka-tests"),
}
# One broker: every topic the workers, `produce` and the helpers create has one replica (the
# worker's default, 3, is refused on a single broker; tests/integration/test_worker_topics.py).
os.environ.setdefault("STREAM_DEDUPE_REPLICATION_FACTOR", "1")


class Broker:
    """The session's broker: bootstrap address, stop, and restart keeping its data."""

    def __init__(self) -> None:
        self.env = {**os.environ, **KAFKA_ENV}
        self.run_dir = Path(KAFKA_ENV["KAFKA_RUN_DIR"])
        self.port = int(KAFKA_ENV["KAFKA_PORT"])
        self.bootstrap = f"127.0.0.1:{self.port}"
        self._cmdline: list[str] | None = None

    def _sh(self, command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(KAFKA_SH), command], env=self.env, capture_output=True, text=True, timeout=240, check=False
        )

    def start(self) -> None:
        """Start a fresh broker; a broker that cannot start fails the session (never a skip)."""
        result = self._sh("start")
        if result.returncode != 0:
            pytest.fail(f"cannot start the Kafka broker (kafka.sh start):\n{result.stdout}\n{result.stderr}")
        self._cmdline = Path(f"/proc/{self.pid()}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")  # type: ignore[assignment]

    def pid(self) -> int:
        return int((self.run_dir / "kafka.pid").read_text().strip())

    def stop(self) -> None:
        """Stop the broker (SIGTERM by pid, SIGKILL after a bounded wait); its data stays on disk."""
        result = self._sh("stop")
        assert result.returncode == 0, result.stderr

    def resume(self) -> None:
        """Start the stopped broker again on the same data (kafka.sh start would format a fresh one)."""
        assert self._cmdline is not None
        log = self.run_dir / "kafka.log"
        before = log.read_text(errors="replace").count("Kafka Server started")
        with open(self.run_dir / "kafka.out", "ab") as out:
            proc = subprocess.Popen(
                [c.decode() for c in self._cmdline],  # type: ignore[attr-defined]
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        # reap it when it exits (else kafka.sh stop sees a zombie as alive)
        threading.Thread(target=proc.wait, daemon=True).start()
        (self.run_dir / "kafka.pid").write_text(f"{proc.pid}\n")
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"broker exited on resume; see {log}")
            if log.read_text(errors="replace").count("Kafka Server started") > before and port_open(self.port):
                return
            time.sleep(0.2)
        pytest.fail(f"broker not ready within 90s after resume; see {log}")


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def broker() -> Iterator[Broker]:
    b = Broker()
    b.start()
    try:
        yield b
    finally:
        b.stop()


@dataclass
class Names:
    """Unique app id and topic names of one test."""

    prefix: str
    app_id: str = ""
    input: str = ""
    events: str = ""
    deduped: str = ""
    dlq: str = ""

    def __post_init__(self) -> None:
        self.app_id = f"{self.prefix}-app"
        self.input = f"{self.prefix}.documents"
        self.events = f"{self.prefix}.events"
        self.deduped = f"{self.prefix}.deduped"
        self.dlq = f"{self.prefix}.dlq"


@pytest.fixture
def names() -> Names:
    return Names(f"t{uuid.uuid4().hex[:10]}")


@dataclass
class WorkerProcess:
    """A worker subprocess with its settings; stopped by the fixture at the end of the test."""

    broker: str
    names: Names
    state_dir: Path
    log_path: Path
    extra: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    web_port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0

    def args(self) -> list[str]:
        n = self.names
        return [
            "worker",
            *("--broker", self.broker, "--app-id", n.app_id, "--input-topic", n.input),
            *("--events-topic", n.events, "--deduped-topic", n.deduped, "--dlq-topic", n.dlq),
            *("--state-dir", str(self.state_dir), "--web-port", str(self.web_port), "--input-partitions", "3"),
            *self.extra,
        ]

    def start(self) -> WorkerProcess:
        assert self.proc is None or self.proc.poll() is not None, "worker already running"
        out = open(self.log_path, "ab")  # noqa: SIM115 - the child owns it
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.env}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "stream_dedupe", *self.args()], stdout=out, stderr=out, env=env
        )
        out.close()
        self.started_at = time.monotonic()
        return self

    def get(self, path: str, timeout: float = 2.0) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.web_port}{path}", timeout=timeout) as r:
                return int(r.status), r.read()
        except urllib.error.HTTPError as exc:
            return int(exc.code), exc.read()

    def wait_ready(self, timeout: float = 60.0) -> float:
        """Seconds from start until /readyz says ready."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"worker exited with {self.proc.returncode}:\n{self.log()[-4000:]}")
            try:
                status, body = self.get("/readyz", 1.0)
                if status == 200:
                    return time.monotonic() - self.started_at
                # a probe is told "not ready" (503) at every moment of the start, never an error
                assert status == 503, f"/readyz answered {status} during start-up: {body[:300]!r}"
            except OSError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"worker not ready after {timeout}s:\n{self.log()[-4000:]}")

    def stop(self, timeout: float = 40.0) -> int | None:
        """SIGTERM, bounded wait, then SIGKILL; returns the exit code."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise AssertionError(f"worker ignored SIGTERM for {timeout}s:\n{self.log()[-3000:]}") from None

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@pytest.fixture
def workers(broker: Broker, names: Names, tmp_path: Path) -> Iterator[Any]:
    """Factory of worker processes for this test; every one is stopped at the end."""
    made: list[WorkerProcess] = []

    def make(
        state_dir: Path | None = None, extra: list[str] | None = None, log_name: str = "", app: Names | None = None
    ) -> WorkerProcess:
        w = WorkerProcess(
            broker.bootstrap,
            app or names,
            state_dir or tmp_path / "state",
            tmp_path / f"worker{log_name or len(made)}.log",
            extra or [],
        )
        made.append(w)
        return w

    yield make
    for w in made:
        with contextlib.suppress(AssertionError):  # a test that failed may leave a worker behind
            w.stop()


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "stream_dedupe", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


# ---------------------------------------------------------------- kafka I/O helpers ----
Record = tuple[bytes | None, bytes | None]


def produce(bootstrap: str, topic: str, records: list[Record]) -> None:
    """Send records in order (a None value is a tombstone) and wait for every ack; creates the topic if missing."""
    from stream_dedupe.worker.topics import prepare_input_topic

    async def main() -> None:
        await prepare_input_topic(bootstrap, topic, 3)
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5, max_request_size=4 << 20)
        await p.start()
        try:
            futures = [await p.send(topic, value, key=key) for key, value in records]
            await asyncio.gather(*futures)
        finally:
            await p.stop()

    asyncio.run(main())


@dataclass
class Msg:
    key: bytes | None
    value: bytes | None
    partition: int
    offset: int
    headers: dict[str, bytes]

    def json(self) -> Any:
        assert self.value is not None
        return json.loads(self.value)


def consume(
    bootstrap: str,
    topic: str,
    until: Any = None,
    timeout: float = 60.0,
    idle: float = 1.5,
    isolation: str = "read_uncommitted",
) -> list[Msg]:
    """All messages of ``topic`` from the start.

    Reads until ``until(messages)`` is true (then drains for ``idle`` s) or, without ``until``,
    until the end offsets are reached. Fails after ``timeout`` seconds. ``isolation``:
    ``read_committed`` skips records of aborted (and waits for open) transactions.
    """

    async def main() -> list[Msg]:
        c = AIOKafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            group_id=None,
            isolation_level=isolation,
        )
        await c.start()
        try:
            deadline = time.monotonic() + 15
            while not c.assignment() and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            tps = sorted(c.assignment())
            assert tps, f"topic {topic} has no partitions (does it exist?)"
            await c.seek_to_beginning(*tps)
            out: list[Msg] = []
            deadline = time.monotonic() + timeout
            done_at: float | None = None
            while time.monotonic() < deadline:
                batch = await c.getmany(timeout_ms=300, max_records=5000)
                for tp, records in batch.items():
                    out.extend(
                        Msg(r.key, r.value, tp.partition, r.offset, {k: v for k, v in r.headers}) for r in records
                    )
                if until is None:
                    ends = await c.end_offsets(tps)
                    positions = [await c.position(tp) for tp in tps]
                    if all(pos >= ends[tp] for pos, tp in zip(positions, tps, strict=True)):
                        return out
                elif until(out):
                    done_at = done_at or time.monotonic()
                    if time.monotonic() - done_at >= idle:
                        return out
            raise AssertionError(f"timed out reading {topic}: {len(out)} messages")
        finally:
            await c.stop()

    return asyncio.run(main())


DOCUMENT_EVENTS = ("new", "duplicate-of", "unchanged", "deleted", "invalid")


def document_events(msgs: list[Msg]) -> list[dict[str, Any]]:
    return [e for e in (m.json() for m in msgs) if e["event"] in DOCUMENT_EVENTS]


def n_document_events(n: int) -> Any:
    return lambda msgs: len({m.headers.get("sd-origin") for m in msgs if m.json()["event"] in DOCUMENT_EVENTS}) >= n


def worker_state(state_dir: Path) -> Any:
    """A stopped worker's state (its Faust RocksDB tables) copied into a MemoryStore."""
    from rocksdict import AccessType, Options, Rdict

    from stream_dedupe.storage.base import NAMESPACES
    from stream_dedupe.storage.memory import MemoryStore

    store = MemoryStore()
    for ns in NAMESPACES:
        path = state_dir / "v1" / "tables" / f"state-{ns}-0.db"
        if not path.exists():
            continue
        db = Rdict(str(path), Options(raw_mode=True), access_type=AccessType.read_only())
        try:
            store.write({ns: {k: v for k, v in db.items() if not k.startswith(b"__faust")}})
        finally:
            db.close()
    return store


def oracle(docs_in_order: list[bytes], batch: int = 500) -> Any:
    """The embedded engine (in memory) over the same records in the same order."""
    from stream_dedupe.config import DedupeParams
    from stream_dedupe.core.engine import DedupeEngine
    from stream_dedupe.core.records import parse_document
    from stream_dedupe.storage.memory import MemoryStore

    store = MemoryStore()
    engine = DedupeEngine(DedupeParams(), store)
    events: list[dict[str, Any]] = []
    for i in range(0, len(docs_in_order), batch):
        chunk = [parse_document(raw, 1 << 20) for raw in docs_in_order[i : i + batch]]
        events.extend(engine.process(chunk))
        engine.commit()
    return store, events


def cluster_sets(store: Any) -> set[frozenset[str]]:
    from stream_dedupe.exports import iter_clusters

    return {frozenset(c["members"]) for c in iter_clusters(store, min_size=1)}


def replay_compacted(msgs: list[Msg]) -> dict[bytes, bytes]:
    """Key -> value after applying a compacted topic in offset order per partition (None deletes)."""
    state: dict[bytes, bytes] = {}
    for m in sorted(msgs, key=lambda m: (m.partition, m.offset)):
        assert m.key is not None
        if m.value is None:
            state.pop(m.key, None)
        else:
            state[m.key] = m.value
    return state
