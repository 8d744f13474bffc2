"""Start-up of ``dedupe``: nothing imported that a run does not need, the same choices without datasketch."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from datasketch.lsh import _optimal_param

from stream_dedupe.consoles import PlainConsole, escape, stderr_console
from stream_dedupe.core.lsh import FP_FN_WEIGHTS, KNOWN_LAYOUTS, choose_bands
from stream_dedupe.core.lsh_params import optimal_layout
from stream_dedupe.storage.base import NAMESPACES
from stream_dedupe.storage.rocks import MEMTABLE_BLOOM_RATIO, RocksStore

from .test_cli import CLI

PROBE = """
import sys
sys.argv = ["stream-dedupe", "dedupe", sys.argv[1], "--state", sys.argv[2], "--no-progress"]
from stream_dedupe.cli import main
try:
    main()
except SystemExit as exc:
    assert not exc.code, exc.code
import os
import orjson
assert os.environ["OPENBLAS_NUM_THREADS"] == "1"  # main() chose it before numpy was imported
sys.stdout.buffer.write(orjson.dumps(sorted(sys.modules)))
"""

GC_PROBE = """
import gc, sys
sys.argv = ["stream-dedupe", "dedupe", sys.argv[1], "--state", sys.argv[2], "--no-progress", "--jobs", "2"]
import stream_dedupe.cli as cli
import stream_dedupe.sign_pool as sign_pool

def collections():
    return sum(generation["collections"] for generation in gc.get_stats())

seen = {}
start_pool = sign_pool.start_pool

def probe(*args):
    seen.update(enabled=gc.isenabled(), frozen=gc.get_freeze_count(), collections=collections() - before)
    return start_pool(*args)

sign_pool.start_pool = probe
before = collections()
try:
    cli.main()
except SystemExit as exc:
    assert not exc.code, exc.code
print(seen["enabled"], seen["frozen"] > 10_000, seen["collections"], gc.isenabled())
"""

THREADS = """
import os, sys
from stream_dedupe.cli_support import one_blas_thread
one_blas_thread()
import numpy
numpy.ones(4) @ numpy.ones(4)
sys.stdout.write(str(len(os.listdir("/proc/self/task"))))
"""


def test_dedupe_starts_without_collecting_garbage_and_works_with_the_collector_on(tmp_path: Path) -> None:
    path = tmp_path / "one.jsonl"
    path.write_bytes(b'{"id": "a", "text": "one document with enough words to be signed by the minhash kernels"}\n')
    result = subprocess.run(
        [sys.executable, "-c", GC_PROBE, str(path), str(tmp_path / "s")], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    # no collection from main() to the --jobs pool (imports, parsing), then the collector is on
    # before any worker is forked, with the start-up's objects frozen; still on at the end
    assert result.stdout.split() == ["True", "True", "0", "True"], result.stdout


def test_other_commands_run_with_the_collector_on(tmp_path: Path) -> None:
    probe = "import gc, sys; sys.argv = ['stream-dedupe', '--version']\nfrom stream_dedupe.cli import main\n"
    probe += "import typer\n_exit = typer.Exit.__init__\n"
    probe += "def seen(self, *a, **k):\n    sys.stderr.write(f'gc {gc.isenabled()}'); _exit(self, *a, **k)\n"
    probe += "typer.Exit.__init__ = seen\ntry:\n    main()\nexcept SystemExit:\n    pass\n"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert "stream-dedupe" in result.stdout and "gc True" in result.stderr, result.stderr


def test_numpy_starts_no_blas_thread_under_the_cli(tmp_path: Path) -> None:
    env = {
        k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")
    }
    ours = subprocess.run([sys.executable, "-c", THREADS], capture_output=True, text=True, env=env, timeout=120)
    assert ours.returncode == 0, ours.stderr
    assert ours.stdout == "1"  # the interpreter's thread only (OpenBLAS would start one per core)
    chosen = subprocess.run(
        [sys.executable, "-c", THREADS + "\nsys.stdout.write(' ' + os.environ['OPENBLAS_NUM_THREADS'])"],
        capture_output=True,
        text=True,
        env={**env, "OPENBLAS_NUM_THREADS": "2"},
        timeout=120,
    )
    assert chosen.returncode == 0, chosen.stderr
    assert chosen.stdout == "2 2"  # the user's choice is kept: OpenBLAS started a second thread"


def test_dedupe_imports_no_tool_or_worker_dependency(tmp_path: Path) -> None:
    path = tmp_path / "one.jsonl"
    path.write_bytes(b'{"id": "a", "text": "one document with enough words to be signed by the minhash kernels"}\n')
    result = subprocess.run(
        [sys.executable, "-c", PROBE, str(path), str(tmp_path / "s")], capture_output=True, timeout=300
    )
    assert result.returncode == 0, result.stderr.decode()
    modules = set(orjson.loads(result.stdout.splitlines()[-1]))
    assert "stream_dedupe.core.kernels" in modules  # the probe did sign the document
    for heavy in (
        "numba",
        "llvmlite",
        "datasketch",
        "scipy",
        "pydantic",
        "stream_dedupe.quality.cli",
        "faust",
        "aiokafka",
        "matplotlib",
        "stream_dedupe.worker.cli",
        "rich",  # stderr is a pipe here: plain text (stream_dedupe.consoles), rich only on a terminal
        "multiprocessing",  # --jobs starts no pool for a one-line file
        "concurrent.futures",
        "numpy.random",  # the permutations come from the standard library's MT19937
        "numpy.polynomial",  # the band layout of the defaults is known, not integrated again
    ):
        assert heavy not in modules, heavy


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [("--threshold", "high", "'high' is not a valid number"), ("--batch-size", "1.5", "'1.5' is not a valid integer")],
)
def test_options_converted_without_pydantic_still_say_what_is_wrong(
    tmp_path: Path, option: str, value: str, message: str
) -> None:
    path = tmp_path / "one.jsonl"
    path.write_bytes(b'{"id": "a", "text": "x"}\n')
    result = subprocess.run(
        [*CLI, "dedupe", str(path), "--state", str(tmp_path / "s"), option, value],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2 and message in result.stderr and option in result.stderr, result.stderr
    assert not (tmp_path / "s").exists()


def memtable_bloom_ratios(state: Path) -> dict[str, float]:
    """Each namespace's memtable bloom ratio, from the OPTIONS file RocksDB wrote at the last open."""
    latest = max(state.glob("OPTIONS-*"), key=lambda p: int(p.name.split("-")[1]))
    ratios, family = {}, None
    for line in latest.read_text().splitlines():
        if line.startswith("[CFOptions "):
            family = line.split('"')[1]
        elif line.strip().startswith("memtable_prefix_bloom_size_ratio=") and family in NAMESPACES:
            ratios[family] = float(line.split("=")[1])
    assert set(ratios) == set(NAMESPACES), ratios
    return ratios


def test_a_small_run_opens_the_state_without_memtable_bloom_filters(tmp_path: Path) -> None:
    small = RocksStore(tmp_path / "s", memtable_bloom=False)
    small.write({"docs": {b"a": b"record"}, "sigs": {b"a": b"signature"}})
    small.close()
    assert set(memtable_bloom_ratios(tmp_path / "s").values()) == {0.0}
    store = RocksStore(tmp_path / "s")  # the same state, as a big run, the worker or the API opens it
    assert store.get_many("docs", [b"a", b"b"]) == [b"record", None]
    store.close()
    assert set(memtable_bloom_ratios(tmp_path / "s").values()) == {MEMTABLE_BLOOM_RATIO}


def test_dedupe_leaves_the_memtable_filters_out_only_for_a_small_file(tmp_path: Path) -> None:
    import gzip

    line = b'{"id": "a", "text": "one document with enough words to be signed by the minhash kernels"}\n'
    (tmp_path / "one.jsonl").write_bytes(line)
    (tmp_path / "one.jsonl.gz").write_bytes(gzip.compress(line))  # small on disk, of unknown size inside
    for name, ratio in (("one.jsonl", 0.0), ("one.jsonl.gz", MEMTABLE_BLOOM_RATIO)):
        state = tmp_path / f"s-{name}"
        result = subprocess.run(
            [*CLI, "dedupe", str(tmp_path / name), "--state", str(state), "--no-progress"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 0, result.stderr
        assert set(memtable_bloom_ratios(state).values()) == {ratio}, name
    piped = subprocess.run(
        [*CLI, "dedupe", "-", "--state", str(tmp_path / "s-stdin"), "--no-progress"],
        input=line.decode(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert piped.returncode == 0, piped.stderr
    assert set(memtable_bloom_ratios(tmp_path / "s-stdin").values()) == {MEMTABLE_BLOOM_RATIO}


def test_a_big_input_enables_numba_up_front(tmp_path: Path) -> None:
    from stream_dedupe.core import jit

    path = tmp_path / "big.jsonl"
    line = orjson.dumps({"id": "a", "text": "the same words again " * 20}) + b"\n"
    path.write_bytes(line * (jit.INPUT_BYTES // len(line) + 1))
    result = subprocess.run(
        [sys.executable, "-c", PROBE, str(path), str(tmp_path / "s")], capture_output=True, timeout=600
    )
    assert result.returncode == 0, result.stderr.decode()
    modules = set(orjson.loads(result.stdout.splitlines()[-1]))
    # compiled: numba, or the ahead-of-time module `make` builds (tests/test_aot.py)
    assert "numba" in modules or any(m.startswith("_stream_dedupe_kernels_") for m in modules)
    assert set(memtable_bloom_ratios(tmp_path / "s").values()) == {MEMTABLE_BLOOM_RATIO}  # a big run keeps them


def test_worker_commands_are_still_registered_when_asked_for() -> None:
    listing = subprocess.run([*CLI, "--help"], capture_output=True, text=True, timeout=120)
    assert listing.returncode == 0 and "worker" in listing.stdout and "produce" in listing.stdout
    worker = subprocess.run([*CLI, "worker", "--help"], capture_output=True, text=True, timeout=120)
    assert worker.returncode == 0, worker.stderr
    assert "Run the Kafka worker" in worker.stdout


@pytest.mark.parametrize("num_perm", [16, 64, 128, 256])
@pytest.mark.parametrize("threshold", [0.1, 0.25, 0.4, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.85, 0.95])
def test_band_layout_is_datasketchs_without_scipy(threshold: float, num_perm: int) -> None:
    expected = _optimal_param(threshold, num_perm, *FP_FN_WEIGHTS)
    assert optimal_layout(threshold, num_perm, FP_FN_WEIGHTS) == expected
    assert choose_bands(threshold, num_perm) == expected


@pytest.mark.parametrize(("key", "layout"), sorted(KNOWN_LAYOUTS.items()))
def test_the_known_layouts_are_the_computed_ones(key: tuple[float, int], layout: tuple[int, int]) -> None:
    threshold, num_perm = key
    assert optimal_layout(threshold, num_perm, FP_FN_WEIGHTS) == layout
    assert _optimal_param(threshold, num_perm, *FP_FN_WEIGHTS) == layout


def test_a_near_tie_is_left_to_datasketch() -> None:
    # with equal weights on a 1-permutation index there is exactly one layout: never a tie
    assert optimal_layout(0.5, 1, (0.5, 0.5)) == (1, 1)
    # weights of zero make every layout's error 0: a tie, so datasketch decides (its first layout)
    assert optimal_layout(0.5, 16, (0.0, 0.0)) is None


MARKUP = [
    "plain text",
    "[yellow]interrupted[/] after 3 lines; the state is consistent.",
    "[red]--strict[/]: 2 invalid record(s); see the invalid events.",
    "[bold red]x[/bold red] and \\[not a tag] and [1, 2] and a[0]",
    "Jaccard threshold. [default: 0.8]",
    "ends with a backslash \\",
]


@pytest.mark.parametrize("text", MARKUP)
def test_plain_console_writes_what_rich_writes_without_a_terminal(
    text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from io import StringIO

    from rich.console import Console
    from rich.markup import escape as rich_escape

    rich = StringIO()
    Console(file=rich, soft_wrap=True, force_terminal=False, highlight=False).print(text)
    PlainConsole().print(text)
    assert capsys.readouterr().err == rich.getvalue()
    assert escape(text) == rich_escape(text)


def test_stderr_console_is_rich_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TTY_COMPATIBLE", "FORCE_COLOR"):
        monkeypatch.delenv(name, raising=False)
    assert isinstance(stderr_console(), PlainConsole)  # pytest captures stderr: not a terminal
    monkeypatch.setenv("FORCE_COLOR", "1")
    assert not isinstance(stderr_console(), PlainConsole) and stderr_console().is_terminal
    monkeypatch.setenv("TTY_COMPATIBLE", "0")
    assert isinstance(stderr_console(), PlainConsole)


LINE_PASS = """
import sys, orjson
import stream_dedupe.core.boilerplate as boilerplate
from stream_dedupe.config import DedupeParams
from stream_dedupe.core import jit
from stream_dedupe.core.engine import DedupeEngine
from stream_dedupe.core.records import parse_document
from stream_dedupe.storage.memory import MemoryStore

compiled = []
line_keys = boilerplate.batch_line_keys
def spy(*args):
    compiled.append(jit.enabled())
    return line_keys(*args)
boilerplate.batch_line_keys = spy
engine = DedupeEngine(DedupeParams(), MemoryStore())
text = "a post number {}\\nwith a few lines\\nsent from my desk"
docs = [orjson.dumps({"id": str(i), "text": text.format(i)}) for i in range(int(sys.argv[1]))]
engine.process([parse_document(raw, 1 << 20) for raw in docs])
print(orjson.dumps(compiled).decode())
"""


@pytest.mark.parametrize(("docs", "compiled"), [(64, True), (3, False)])
def test_a_big_first_batch_learns_its_lines_compiled(docs: int, compiled: bool) -> None:
    # A batch is split into lines before it is signed: its size must choose numba for that pass too
    # (the pure twin of the line kernel took ~2 s on a first batch of 512 mail posts). Without the
    # ahead-of-time module (a small batch loads it when there is one: tests/test_aot.py).
    env = {k: v for k, v in os.environ.items() if k != "STREAM_DEDUPE_JIT"}
    env["STREAM_DEDUPE_AOT"] = "0"
    result = subprocess.run([sys.executable, "-c", LINE_PASS, str(docs)], capture_output=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr.decode()
    assert orjson.loads(result.stdout.splitlines()[-1]) == [compiled]


BLAS_PROBE = """
import sys
if sys.argv[1] == "scipy-first":
    import scipy.linalg
import numpy as np
from stream_dedupe.config import DedupeParams
from stream_dedupe.core import jit
from stream_dedupe.core.signer import Signer
jit.enable()
Signer(DedupeParams()).sign(["a few words to sign with the compiled kernels"] * 3)
loaded = "scipy.linalg" in sys.modules
import numba
import scipy.linalg  # importable as usual afterwards
@numba.njit
def dot(a, b):
    return np.dot(a, b)
x = np.arange(6.0).reshape(2, 3)
assert np.array_equal(dot(x, x.T), x @ x.T)  # np.dot still finds BLAS when a kernel using it compiles
print(int(loaded))
"""


@pytest.mark.parametrize(("case", "scipy_loaded"), [("fresh", 0), ("scipy-first", 1)])
def test_numba_is_enabled_without_importing_scipy(case: str, scipy_loaded: int) -> None:
    # numba's CPU target probes for BLAS by importing scipy.linalg (0.25 s of CPU per process);
    # jit.enable() answers the probe without it, and leaves scipy importable, np.dot working.
    env = {k: v for k, v in os.environ.items() if k != "STREAM_DEDUPE_JIT"}
    env["STREAM_DEDUPE_AOT"] = "0"  # numba's own start (the ahead-of-time module imports no numba)
    result = subprocess.run([sys.executable, "-c", BLAS_PROBE, case], capture_output=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr.decode()
    assert int(result.stdout.splitlines()[-1]) == scipy_loaded
