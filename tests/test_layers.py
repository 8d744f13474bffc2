"""The layers point one way: storage and configuration know no algorithm.

``stream_dedupe.storage`` (key-value adapters, the typed state view), ``stream_dedupe.config``
(parameters: numbers) and ``stream_dedupe.model`` (plain data types) must not import
``stream_dedupe.core``, not even inside a function: the core depends on them, never the reverse.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import stream_dedupe

PACKAGE = Path(stream_dedupe.__file__).parent
LOWER_LAYERS = sorted([*PACKAGE.joinpath("storage").glob("*.py"), PACKAGE / "config.py", PACKAGE / "model.py"])


def imported_modules(path: Path) -> list[str]:
    """Every module an ``import`` or ``from ... import`` statement anywhere in ``path`` names."""
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the module's package
                package = path.parent.relative_to(PACKAGE.parent).parts
                base = ".".join(package[: len(package) - node.level + 1])
                names.append(f"{base}.{node.module}" if node.module else base)
            elif node.module:
                names.append(node.module)
    return names


@pytest.mark.parametrize("path", LOWER_LAYERS, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_lower_layers_do_not_import_the_core(path: Path) -> None:
    core = [m for m in imported_modules(path) if m == "stream_dedupe.core" or m.startswith("stream_dedupe.core.")]
    assert not core, f"{path.relative_to(PACKAGE)} imports {core}: move the shared type to stream_dedupe/model.py"


def test_the_check_sees_function_level_imports(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from stream_dedupe.core.lsh import choose_bands\n    return choose_bands\n")
    assert imported_modules(probe) == ["stream_dedupe.core.lsh"]
