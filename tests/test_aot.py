"""The ahead-of-time kernels: built once, loaded without numba, the same events, a misfit never wrong."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import orjson
import pytest

from bench.synth import generate
from stream_dedupe.core import aot, jit

ROOT = Path(__file__).resolve().parents[1]

BUILD = """
from stream_dedupe.core import aot
print(aot.build())
"""

RUN = """
import sys
sys.argv = ["stream-dedupe", "dedupe", sys.argv[1], "--state", sys.argv[2], "--events", sys.argv[3], "--no-progress"]
from stream_dedupe.cli import main
try:
    main()
except SystemExit as exc:
    assert not exc.code, exc.code
from stream_dedupe.core import jit
print(jit.aot_active(), "numba" in sys.modules)
"""


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("STREAM_DEDUPE_JIT", "STREAM_DEDUPE_AOT")}
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A module built into a directory of its own (not the user cache `make` fills)."""
    root = tmp_path_factory.mktemp("aot")
    result = subprocess.run(
        [sys.executable, "-c", BUILD],
        capture_output=True,
        text=True,
        env=_env(STREAM_DEDUPE_AOT_DIR=str(root)),
        cwd=ROOT,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    assert (root / aot.build_key() / "manifest.json").exists()
    return root


def _dedupe(corpus: Path, tmp_path: Path, label: str, env: dict[str, str]) -> tuple[list[str], str, bytes]:
    """``dedupe`` over ``corpus``, a fresh process: [module active, numba imported], kernels row, events."""
    events = tmp_path / f"{label}.jsonl"
    result = subprocess.run(
        [sys.executable, "-c", RUN, str(corpus), str(tmp_path / f"state-{label}"), str(events)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    summary_row = [line.split() for line in result.stderr.splitlines() if line.strip().startswith("kernels")]
    assert summary_row, result.stderr
    return result.stdout.split()[-2:], summary_row[0][-1], events.read_bytes()


def test_a_run_loads_the_module_without_numba_and_decides_the_same(built: Path, tmp_path: Path) -> None:
    corpus = tmp_path / "docs.jsonl"
    corpus.write_bytes(b"".join(orjson.dumps(d) + b"\n" for d in generate(3000, 4, 0.3)))  # > 4 MB: compiled
    aot_run = _dedupe(corpus, tmp_path, "aot", _env(STREAM_DEDUPE_AOT_DIR=str(built)))
    numba_run = _dedupe(corpus, tmp_path, "numba", _env(STREAM_DEDUPE_AOT="0"))
    assert aot_run[:2] == (["True", "False"], "ahead-of-time")  # the module's kernels, numba never imported
    assert numba_run[:2] == (["False", "True"], "numba")
    assert aot_run[2] == numba_run[2]
    assert b'"duplicate-of"' in aot_run[2]


def test_a_small_run_uses_the_module_when_there_is_one_and_stays_pure_without(built: Path, tmp_path: Path) -> None:
    # Under 4 MB numba's import would cost more than the run, but the module loads in a millisecond
    # and is faster from the first document (a big group of near copies: 3x), so only its absence
    # keeps a small run pure.
    corpus = tmp_path / "small.jsonl"
    page = " ".join(f"w{i % 97}x{i}" for i in range(300))
    corpus.write_bytes(b"".join(orjson.dumps({"id": str(i), "text": f"{page} visit {i}"}) + b"\n" for i in range(60)))
    assert corpus.stat().st_size < jit.INPUT_BYTES
    aot_run = _dedupe(corpus, tmp_path, "aot", _env(STREAM_DEDUPE_AOT_DIR=str(built)))
    pure_run = _dedupe(corpus, tmp_path, "pure", _env(STREAM_DEDUPE_AOT="0"))
    assert aot_run[:2] == (["True", "False"], "ahead-of-time")
    assert pure_run[:2] == (["False", "False"], "pure")  # no module: pure, numba never imported
    assert aot_run[2] == pure_run[2]
    assert aot_run[2].count(b'"duplicate-of"') >= 50  # one cluster of near copies


API_BATCHES = """
import sys
from stream_dedupe import Deduper
from stream_dedupe.core import jit
page = " ".join(f"w{i % 97}x{i}" for i in range(300))
with Deduper.memory() as dd:
    decisions = [dd.add({"id": str(i), "text": f"{page} visit {i}"}) for i in range(3)]
print(jit.kernel_mode(), "numba" in sys.modules, [d.kind for d in decisions])
"""


def test_the_python_api_uses_the_module_from_its_first_small_batch(built: Path) -> None:
    # Deduper.add decides one document a batch: under SIGN_DOCS numba would not repay its import,
    # but the module does from the first document; without one the batches stay pure.
    def run(env: dict[str, str]) -> str:
        result = subprocess.run(
            [sys.executable, "-c", API_BATCHES], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300
        )
        assert result.returncode == 0, result.stderr
        return result.stdout.strip()

    decisions = "['new', 'duplicate-of', 'duplicate-of']"
    assert run(_env(STREAM_DEDUPE_AOT_DIR=str(built))) == f"ahead-of-time False {decisions}"
    assert run(_env(STREAM_DEDUPE_AOT="0")) == f"pure False {decisions}"


def test_another_machine_or_code_finds_no_module(built: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert aot.load(built) is not None
    monkeypatch.setattr(aot, "_cpu_identity", lambda: "another cpu")
    assert aot.load(built) is None


def test_arguments_that_fit_no_export_run_the_pure_twin_then_numba(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    def export(*args: object) -> str:
        calls.append("export")
        return "export"

    def pure(*args: object) -> str:
        calls.append("pure")
        return "pure"

    def numba(*args: object) -> str:
        calls.append("numba")
        return "numba"

    monkeypatch.setattr(aot.AotKernel, "misfits", 0)
    monkeypatch.setattr(aot, "MISFITS", 2)
    kernel = aot.AotKernel([(export, [["a", "<u4", 1], ["i"]])], pure, numba)
    aligned = np.arange(4, dtype=np.uint32)
    unaligned = np.frombuffer(b"\0" + aligned.tobytes(), dtype="<u4", count=4, offset=1)
    assert not unaligned.flags.aligned
    assert kernel(aligned, 3) == "export"
    assert kernel(unaligned, 3) == "pure"  # an unaligned view
    assert kernel(aligned.astype(np.int64), 3) == "pure"  # another dtype
    assert kernel(aligned, True) == "numba"  # a bool is not an int64, and the third misfit goes to numba
    assert kernel(aligned[::2], 3) == "numba"  # not contiguous
    assert kernel(aligned, 1 << 63) == "numba"  # out of int64's range
    assert calls == ["export", "pure", "pure", "numba", "numba", "numba"]


def test_decoded_signatures_are_aligned_for_the_kernels() -> None:
    from stream_dedupe.config import DedupeParams
    from stream_dedupe.core.signer import Signer, decode_signed

    signer = Signer(DedupeParams())
    signed = signer.sign([" ".join(f"word{i}" for i in range(40))])[0]
    _, decoded = decode_signed(signer.encode(signed))
    assert decoded.signature is not None and decoded.shingle_set is not None
    assert decoded.signature.flags.aligned and decoded.shingle_set.flags.aligned
    assert np.array_equal(decoded.signature, signed.signature)


def test_the_kernel_oracles_also_hold_under_numba() -> None:
    """This process runs the ahead-of-time kernels when `make` built them; numba's are checked too."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/test_pure_kernels.py",
            "tests/test_line_keys.py",
        ],
        capture_output=True,
        text=True,
        env=_env(STREAM_DEDUPE_AOT="0"),
        cwd=ROOT,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:]
    assert " passed" in result.stdout and "failed" not in result.stdout


def test_numpy_scalars_and_each_spec_kind_fit_their_exports(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(aot.AotKernel, "misfits", 0)
    kernel = aot.AotKernel(
        [(lambda *args: "export", [["a", "<u8", 2], ["i"], ["b"], ["f"]])], lambda *a: "pure", lambda *a: "numba"
    )
    matrix = np.zeros((2, 3), dtype=np.uint64)
    assert kernel(matrix, np.int64(-5), np.bool_(True), np.float32(0.5)) == "export"
    assert kernel(matrix, 7, False, 1.0) == "export"
    before = aot.AotKernel.misfits
    assert kernel(matrix.T, 7, False, 1.0) == "pure"  # a transposed view is not C-contiguous
    assert kernel(matrix[0], 7, False, 1.0) == "pure"  # one rank short
    assert kernel(matrix, 7.0, False, 1.0) == "pure"  # a float where an int64 goes
    assert kernel(matrix, 7, 1, 1.0) == "pure"  # an int where a bool goes
    assert kernel(matrix, 7, False) == "pure"  # an argument short
    assert aot.AotKernel.misfits == before + 5


def test_int64_bounds_and_one_argument_signatures_are_checked_exactly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(aot.AotKernel, "misfits", 0)
    kernel = aot.AotKernel([(lambda *args: "export", [["i"]])], lambda *a: "pure", lambda *a: "numba")
    for value in (-(1 << 63), (1 << 63) - 1, 0, np.int64(-1), np.uint64((1 << 63) - 1), np.int8(3)):
        assert kernel(value) == "export", value
    for value in (1 << 63, -(1 << 63) - 1, np.uint64(1 << 63), True, np.bool_(False), 1.0, "1", None):
        assert kernel(value) == "pure", value
    assert kernel() == "pure" and kernel(1, 2) == "pure"  # the wrong number of arguments


def test_prune_removes_modules_unused_for_the_stale_days_and_nothing_else(tmp_path: Path) -> None:
    now = 1_900_000_000.0
    day = 86400.0

    def module(name: str, age_days: float) -> Path:
        directory = tmp_path / name
        directory.mkdir()
        (directory / "manifest.json").write_text("{}")
        os.utime(directory / "manifest.json", (now - age_days * day, now - age_days * day))
        return directory

    current = module("a" * 24, 400)  # this code's key: kept however old
    stale = module("b" * 24, aot.STALE_DAYS + 1)
    recent = module("c" * 24, aot.STALE_DAYS - 1)  # another checkout's or Python's, still in use
    unfinished = tmp_path / ("d" * 24)
    unfinished.mkdir()  # no manifest: a build in progress elsewhere
    other = module("not-a-key", 400)
    (tmp_path / ("e" * 24)).write_text("a file")

    assert aot.prune(tmp_path, keep=current.name, now=now) == [stale]
    assert not stale.exists()
    assert current.exists() and recent.exists() and unfinished.exists() and other.exists()
    assert (tmp_path / ("e" * 24)).exists()
    assert aot.prune(tmp_path / "missing", keep="x", now=now) == []


def test_loading_a_module_marks_it_used(built: Path) -> None:
    manifest = built / aot.build_key() / "manifest.json"
    old = manifest.stat().st_mtime - 10 * 86400
    os.utime(manifest, (old, old))
    assert aot.load(built) is not None
    assert manifest.stat().st_mtime > old + 9 * 86400
    recent = manifest.stat().st_mtime - 3600  # marked under a day ago: not written again
    os.utime(manifest, (recent, recent))
    assert aot.load(built) is not None
    assert manifest.stat().st_mtime == recent
    assert aot.prune(built, keep="0" * 24) == []  # a module in use is never stale


def test_a_module_of_the_same_name_from_another_directory_is_not_reused(
    built: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The module's name is the build key: a build elsewhere (another cache, these tests) has the same one."""
    manifest = orjson.loads((built / aot.build_key() / "manifest.json").read_bytes())
    other = types.ModuleType(manifest["module"])  # e.g. the user cache's module, with other export names
    other.__file__ = "/another/cache/" + manifest["module"] + ".so"
    monkeypatch.setitem(sys.modules, manifest["module"], other)
    loaded = aot.load(built)
    assert loaded is not None and loaded.keys() == manifest["kernels"].keys()
    assert all(callable(function) for exports in loaded.values() for function, _ in exports)


def test_a_manifest_naming_exports_its_module_lacks_loads_nothing(built: Path, tmp_path: Path) -> None:
    damaged = tmp_path / aot.build_key()
    shutil.copytree(built / aot.build_key(), damaged)
    manifest = orjson.loads((damaged / "manifest.json").read_bytes())
    first = next(iter(manifest["kernels"]))
    manifest["kernels"][first][0][0] += "_gone"
    (damaged / "manifest.json").write_bytes(orjson.dumps(manifest))
    assert aot.load(tmp_path) is None  # the kernels then come from numba, never an AttributeError


def test_make_rebuilds_the_kernels_when_any_kernel_module_changes() -> None:
    makefile = (ROOT / "Makefile").read_text()
    line = next(x for x in makefile.splitlines() if x.startswith("KERNEL_SOURCES"))
    listed = set(line.split(",", 1)[1].rstrip(")").split())
    assert listed == {name.rsplit(".", 1)[-1] + ".py" for name in aot.KERNEL_MODULES}
    assert all(name.startswith("stream_dedupe.core.") for name in aot.KERNEL_MODULES)
    assert "$(KERNELS): $(STAMP) $(KERNEL_SOURCES)" in makefile
    test_target = next(x for x in makefile.splitlines() if x.startswith("test:"))
    assert "$(KERNELS)" in test_target.split()
