"""The examples of docs/api.md, README.md ("Use it from Python") and stream_dedupe.api run as written."""

from __future__ import annotations

import doctest
import os
import re
from pathlib import Path

import pytest

import stream_dedupe.api
from stream_dedupe import Deduper

ROOT = Path(__file__).resolve().parents[1]
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def python_blocks(path: Path, section: str | None = None) -> list[str]:
    text = path.read_text(encoding="utf-8")
    if section is not None:
        start = text.index(section)
        end = text.find("\n## ", start + len(section))
        text = text[start : end if end != -1 else None]
    return _BLOCK.findall(text)


def run_blocks(blocks: list[str], where: Path, name: str) -> dict[str, object]:
    namespace: dict[str, object] = {"__name__": name}
    cwd = os.getcwd()
    os.chdir(where)
    try:
        for i, block in enumerate(blocks):
            exec(compile(block, f"{name} block {i + 1}", "exec"), namespace)
    finally:
        os.chdir(cwd)
        for value in namespace.values():  # a failed block must not leave a state locked
            if isinstance(value, Deduper):
                value.close()
    return namespace


def test_docs_api_examples_run(tmp_path: Path) -> None:
    blocks = python_blocks(ROOT / "docs" / "api.md")
    assert len(blocks) >= 7
    namespace = run_blocks(blocks, tmp_path, "docs/api.md")
    assert (tmp_path / "state" / "CURRENT").exists()  # the page's state is a real RocksDB directory
    assert namespace["kept_ids"] == ["a", "c"]


def test_readme_example_runs(tmp_path: Path) -> None:
    [block] = python_blocks(ROOT / "README.md", "## Use it from Python")
    assert len(block.strip().splitlines()) <= 12
    run_blocks([block], tmp_path, "README.md")


def test_module_docstring_doctest() -> None:
    failures, tried = doctest.testmod(stream_dedupe.api, verbose=False)
    assert tried >= 3 and failures == 0


def test_examples_fail_when_an_assertion_fails(tmp_path: Path) -> None:
    # the runner really executes the blocks (a wrong claim in a block fails the test)
    with pytest.raises(AssertionError):
        run_blocks(["from stream_dedupe import Deduper\nassert Deduper.memory().seq == 1\n"], tmp_path, "x")
