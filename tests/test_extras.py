"""Optional extras: a tool whose dependency is missing says what to install (one line, exit 2)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "examples" / "crawl-sample.jsonl"

# The CLI as `stream-dedupe` runs it, in an interpreter where matplotlib cannot be imported (as in
# the runtime install and the container image, which leave out the `tools` extra).
WITHOUT_MATPLOTLIB = (
    "import sys; sys.modules['matplotlib'] = None; from stream_dedupe.cli import main; "
    "sys.argv = ['stream-dedupe', *sys.argv[1:]]; main()"
)


def test_tune_without_matplotlib_names_the_extra_and_exits_2(tmp_path: Path) -> None:
    out = tmp_path / "tune-out"
    proc = subprocess.run(
        [sys.executable, "-c", WITHOUT_MATPLOTLIB, "tune", str(SAMPLE), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines == [
        "error: `stream-dedupe tune` needs matplotlib, which the runtime install leaves out: "
        "pip install 'stream-dedupe[tools]'"
    ], proc.stderr
    assert not out.exists(), "nothing may be written before the check"


def test_matplotlib_is_a_tools_extra_that_dev_includes() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not any(d.startswith("matplotlib") for d in project["dependencies"]), "runtime must not need matplotlib"
    assert any(d.startswith("matplotlib") for d in project["optional-dependencies"]["tools"])
    assert "stream-dedupe[tools]" in project["optional-dependencies"]["dev"]
