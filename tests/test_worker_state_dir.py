"""The worker's state directory: a missing parent and a second worker give one-line errors (exit 2).

Both are checked before the worker connects to Kafka, so no broker is needed here.
"""

from __future__ import annotations

import fcntl
import subprocess
import sys
from pathlib import Path


def run_worker(state_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "stream_dedupe", "worker", "--broker", "127.0.0.1:1", "--state-dir", str(state_dir)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_missing_parent_of_the_state_dir_is_a_one_line_error(tmp_path: Path) -> None:
    state = tmp_path / "no-such-parent" / "state"
    result = run_worker(state)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert lines[0].startswith("error: ") and str(state.parent) in lines[0] and "--state-dir" in lines[0]


def test_a_second_worker_on_the_same_state_dir_is_a_one_line_error(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    with open(state / ".worker.lock", "w") as held:  # what a running worker holds
        fcntl.flock(held.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.write("4242\n")
        held.flush()
        result = run_worker(state)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert "another worker (pid 4242)" in lines[0] and str(state) in lines[0]
