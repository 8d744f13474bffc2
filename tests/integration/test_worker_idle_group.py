"""A worker stays in its consumer group however long it runs (regression: it left after 1,000 s).

Faust's consumer fetches only while one of its partitions is active, and the worker keeps all of
them paused (the decide stage and the shard servers read with consumers of their own). aiokafka
makes a consumer that has not fetched for ``max_poll_interval`` leave its group, and it joins
again only once it fetches: with Faust's default of 1,000 s every worker left the group after
~17 minutes and the stream stopped. The test lowers Faust's *default* to 6 s in the worker's
process and checks that the worker's own setting keeps it in the group, ready and deciding, past
three times that.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from tests.integration.conftest import Broker, Names, WorkerProcess, consume, n_document_events, produce

#: The worker's command line, with Faust's default max poll interval lowered to 6 s.
LOW_DEFAULT = (
    "import sys, faust.types.settings.settings as s;"
    "s.Settings.__dict__['broker_max_poll_interval'].default = 6.0;"
    "from stream_dedupe.cli import main; sys.argv = ['stream-dedupe', *sys.argv[1:]]; main()"
)


class LowDefaultWorker(WorkerProcess):
    def start(self) -> WorkerProcess:
        out = open(self.log_path, "ab")  # noqa: SIM115 - the child owns it
        self.proc = subprocess.Popen([sys.executable, "-c", LOW_DEFAULT, *self.args()], stdout=out, stderr=out)
        out.close()
        self.started_at = time.monotonic()
        return self


def group_members(bootstrap: str, group: str) -> int:
    from aiokafka.admin import AIOKafkaAdminClient  # type: ignore[import-untyped]

    async def describe() -> int:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            response = await admin.describe_consumer_groups([group])
        finally:
            await admin.close()
        return len(response[0].groups[0][5])

    return asyncio.run(describe())


def doc(i: int) -> tuple[bytes, bytes]:
    text = f"document {i} about the idle group: " + " ".join(f"word{i}x{j}" for j in range(40))
    return str(i).encode(), orjson.dumps({"id": f"d{i}", "text": text})


def test_a_worker_whose_partitions_are_all_paused_stays_in_the_group(
    broker: Broker, names: Names, tmp_path: Path
) -> None:
    w: Any = LowDefaultWorker(broker.bootstrap, names, tmp_path / "state", tmp_path / "worker.log", [])
    try:
        w.start()
        w.wait_ready(120)
        produce(broker.bootstrap, names.input, [doc(0)])
        consume(broker.bootstrap, names.events, until=n_document_events(1), timeout=60, idle=0)
        time.sleep(20)  # more than three times the lowered default, every partition paused
        assert "LeaveGroup" not in w.log(), w.log()[-3000:]
        assert w.get("/readyz")[0] == 200, w.log()[-3000:]
        assert group_members(broker.bootstrap, names.app_id) == 1
        produce(broker.bootstrap, names.input, [doc(1)])  # and it still decides
        consume(broker.bootstrap, names.events, until=n_document_events(2), timeout=60, idle=0)
    finally:
        assert w.stop() == 0, w.log()[-3000:]
