"""Ahead-of-time compiled kernels: numba's start-up cost paid once per machine, not once per process.

Importing numba and loading its cached machine code costs ~0.4 s of every process that uses the
compiled kernels (BENCHMARKS.md, "Start-up"): 12% of deduping 20,000 documents. :func:`build`
compiles every kernel signature the ``dedupe`` path uses (those :func:`stream_dedupe.warmup.warm`
compiles) into one extension module with numba's ahead-of-time compiler (``numba.pycc``), for
this machine's CPU; :func:`load` imports it in under a millisecond, without numba.
``python -m stream_dedupe.warmup`` (``make`` runs it after installing) builds it.

The module lives in the user cache (``~/.cache/stream-dedupe/kernels``, or
``STREAM_DEDUPE_AOT_DIR``) under a key of everything its code depends on: the kernels' source,
the Python, numpy and numba versions, the machine and its CPU model and flags. Anything else
(another CPU, an edited kernel, an upgrade) finds no module and uses numba as before; so does
``STREAM_DEDUPE_AOT=0``. An exported function does not check its arguments' types, so
:class:`AotKernel` does: a call whose arrays have another dtype, rank, layout or alignment than
every exported signature runs the kernel's pure twin instead (numba past :data:`MISFITS` such calls).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import importlib.util
import json
import os
import platform
import re
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

#: The modules whose kernels are compiled (their source is part of the key).
KERNEL_MODULES = (
    "stream_dedupe.core.kernels",
    "stream_dedupe.core.lsh",
    "stream_dedupe.core.bandindex",
    "stream_dedupe.core.lineform",
    "stream_dedupe.core.linekeys",
    "stream_dedupe.core.verify",
)
_MANIFEST = "manifest.json"
#: Bumped when what :func:`build` writes changes (part of the key).
FORMAT = b"aot-1"
Spec = list[Any]  # ["a", dtype str, ndim] | ["i"] | ["b"] | ["f"]
#: A built module that no process loaded for this long is removed by the next
#: ``python -m stream_dedupe.warmup`` (another version's kernels, another Python's: ~860 KB each).
STALE_DAYS = 30
#: A load marks its module as used (the manifest's mtime) at most this often.
_MARK_SECONDS = 24 * 3600
_KEY_NAME = re.compile(r"[0-9a-f]{24}")


def enabled_by_env() -> bool:
    """False when ``STREAM_DEDUPE_AOT=0`` (numba only, as before this module)."""
    return os.environ.get("STREAM_DEDUPE_AOT", "1") != "0"


def cache_root() -> Path:
    """Where built modules are kept (``STREAM_DEDUPE_AOT_DIR``, else the user cache)."""
    given = os.environ.get("STREAM_DEDUPE_AOT_DIR")
    if given:
        return Path(given)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "stream-dedupe" / "kernels"


def _cpu_identity() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as info:
            wanted = [line.strip() for line in info if line.startswith(("model name", "flags"))]
        return "\n".join(dict.fromkeys(wanted))  # every core repeats them
    except OSError:
        return platform.processor()


def _package_stamp(package: str) -> bytes:
    """The version file of an installed package, found without importing it (or b"none")."""
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        return b"none"
    try:
        return (Path(spec.origin).parent / "_version.py").read_bytes()
    except OSError:
        return b"none"


def build_key() -> str:
    """A hash of everything the compiled module depends on (see the module docstring)."""
    digest = hashlib.sha256()
    digest.update(FORMAT)
    for name in KERNEL_MODULES:
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.origin is not None
        digest.update(Path(spec.origin).read_bytes())
    for part in (sys.version, np.__version__, platform.machine(), _cpu_identity()):
        digest.update(part.encode("utf-8", "replace") + b"\0")
    for package in ("numba", "llvmlite"):
        digest.update(_package_stamp(package) + b"\0")
    return digest.hexdigest()[:24]


def _spec(numba_type: Any) -> Spec | None:
    from numba.core import types
    from numba.np import numpy_support

    if isinstance(numba_type, types.Array):
        if numba_type.layout != "C" or not numba_type.aligned:
            return None
        return ["a", np.dtype(numpy_support.as_dtype(numba_type.dtype)).str, numba_type.ndim]
    if numba_type == types.int64:
        return ["i"]
    if numba_type == types.boolean:
        return ["b"]
    if numba_type == types.float64:
        return ["f"]
    return None


def _writable(numba_type: Any) -> Any:
    from numba.core import types

    if isinstance(numba_type, types.Array) and not numba_type.mutable:
        return numba_type.copy(readonly=False)  # the same data model: one export serves both
    return numba_type


def build(root: Path | None = None) -> Path:
    """Compile every kernel signature of the ``dedupe`` path into one module; return its directory.

    Takes numba's compile time (11-17 s measured on 2 cores) and a C compiler (``numba.pycc`` links with
    the one Python was built with).

    Raises:
        StreamDedupeError: if numba cannot compile the module (the message says what failed).

    """
    from stream_dedupe.core import jit
    from stream_dedupe.errors import StreamDedupeError
    from stream_dedupe.warmup import warm

    jit.enable_numba()
    warm()  # every kernel of the dedupe path compiled: their signatures are the ones to export
    import warnings

    typing: Any = importlib.import_module("numba.core.typing")  # numba has no type hints
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numba.pycc is "pending deprecation"
        pycc: Any = importlib.import_module("numba.pycc")
    signature, CC = typing.signature, pycc.CC

    key = build_key()
    name = f"_stream_dedupe_kernels_{key}"
    cc = CC(name)
    cc.target_cpu = "host"
    cc.verbose = False
    manifest: dict[str, list[tuple[str, list[Spec]]]] = {}
    for kernel in jit.kernels():
        if kernel.options.get("inline") == "always" or kernel.dispatcher is None:
            continue
        seen: set[str] = set()
        for sig in kernel.dispatcher.nopython_signatures:
            args = [_writable(a) for a in sig.args]
            specs = [_spec(a) for a in args]
            text = str(args)
            if text in seen or any(s is None for s in specs):
                continue
            seen.add(text)
            qualified = f"{kernel.py_func.__module__}:{kernel.py_func.__name__}"
            export = f"{kernel.py_func.__module__.rsplit('.', 1)[-1]}__{kernel.py_func.__name__}__{len(seen)}"
            cc.export(export, signature(_writable(sig.return_type), *args))(kernel.py_func)
            manifest.setdefault(qualified, []).append((export, [s for s in specs if s is not None]))
    import tempfile

    root = root or cache_root()
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        cc.output_dir = tmp
        try:
            cc.compile()
        except Exception as exc:  # distutils, the linker, numba's lowering: all say what failed
            raise StreamDedupeError(
                f"cannot compile the ahead-of-time kernels ({exc}); the engine uses numba's JIT instead. "
                "Install a C compiler (gcc) and run `python -m stream_dedupe.warmup` again"
            ) from exc
        (Path(tmp) / _MANIFEST).write_text(json.dumps({"module": name, "kernels": manifest}))
        target = root / key
        if target.exists():
            shutil.rmtree(target)
        os.chmod(tmp, 0o755)  # TemporaryDirectory makes it 0700: readable by the users who can read the cache
        os.replace(tmp, target)
        Path(tmp).mkdir()  # for TemporaryDirectory's cleanup
    return root / key


#: Calls that fit no exported signature, per process, after which numba is imported for them
#: (until then they run the kernel's pure twin, which gives the same results).
MISFITS = 64


class AotKernel:
    """A kernel's exported signatures, each called only with arguments of its types.

    A call that fits none (an unaligned view, another dtype) runs ``pure``, the kernel's
    bit-identical numpy twin, and after :data:`MISFITS` such calls in a process, ``fallback``
    (numba) from then on.

    Args:
        exports: ``(function, argument specs)`` per exported signature.
        pure: The kernel's pure implementation.
        fallback: Called with the arguments once there were too many misfits.

    """

    misfits = 0  # shared by every kernel of the process

    def __init__(
        self,
        exports: list[tuple[Callable[..., Any], list[Spec]]],
        pure: Callable[..., Any],
        fallback: Callable[..., Any],
    ) -> None:
        self.pure = pure
        self.fallback = fallback
        self._checked = [(function, _compiled(specs)) for function, specs in exports]

    def __call__(self, *args: Any) -> Any:
        """Run the first exported signature the arguments fit, else the pure twin or numba."""
        for function, fits in self._checked:
            if fits(args):
                return function(*args)
        AotKernel.misfits += 1
        if AotKernel.misfits > MISFITS:
            return self.fallback(*args)
        return self.pure(*args)


#: ``ndarray.flags.num`` bits of a C-contiguous, aligned array (numpy's ``NPY_ARRAY_C_CONTIGUOUS`` and
#: ``NPY_ARRAY_ALIGNED``, part of its stable C API).
_CONTIGUOUS_ALIGNED = 0x0001 | 0x0100
_INT64 = range(-(1 << 63), 1 << 63)


def _compiled(specs: list[Spec]) -> Callable[[tuple[Any, ...]], bool]:
    """A function telling whether a call's arguments have exactly the exported types of ``specs``.

    It runs before every call of a kernel, so it is generated as straight-line code (as
    ``dataclasses`` generates ``__init__``): 0.7 us for ``_query_insert``'s eight arguments,
    against 1.9 us for a loop over the specs, whose compiled function itself takes 0.2 us
    (BENCHMARKS.md, "Kernel calls and row stacking"). An array fits when it is an ``ndarray`` of the dtype and
    rank, C-contiguous and aligned; an ``i`` an int (not a bool) or numpy integer in int64's
    range; a ``b`` a bool or numpy bool; an ``f`` a float or numpy floating.
    """
    names = [f"v{i}" for i in range(len(specs))]
    env: dict[str, Any] = {
        "_ND": np.ndarray,
        "_NP_INT": np.integer,
        "_NP_BOOL": np.bool_,
        "_NP_FLOAT": np.floating,
        "_INT64": _INT64,
        "_CA": _CONTIGUOUS_ALIGNED,
    }
    body = [f"def fits(args):\n    if len(args) != {len(specs)}:\n        return False"]
    if names:
        body.append(f"    {', '.join(names)}, = args")
    for i, (name, spec) in enumerate(zip(names, specs, strict=True)):
        kind = spec[0]
        if kind == "a":
            env[f"d{i}"] = np.dtype(spec[1])
            body.append(
                f"    if not isinstance({name}, _ND) or {name}.ndim != {int(spec[2])}"
                f" or ({name}.dtype is not d{i} and {name}.dtype != d{i})"
                f" or {name}.flags.num & _CA != _CA:\n        return False"
            )
        elif kind == "i":
            body.append(
                f"    if type({name}) is int:\n"
                f"        if not -9223372036854775808 <= {name} <= 9223372036854775807:\n            return False\n"
                f"    elif isinstance({name}, bool) or not isinstance({name}, _NP_INT) or int({name}) not in _INT64:\n"
                f"        return False"
            )
        elif kind == "b":
            body.append(f"    if type({name}) is not bool and not isinstance({name}, _NP_BOOL):\n        return False")
        else:
            body.append(f"    if not isinstance({name}, float | _NP_FLOAT):\n        return False")
    body.append("    return True\n")
    # the code holds names, integers and literals only: the dtypes go in through ``env``
    exec("\n".join(body), env)
    fits: Callable[[tuple[Any, ...]], bool] = env["fits"]
    return fits


def load(root: Path | None = None) -> dict[str, list[tuple[Callable[..., Any], list[Spec]]]] | None:
    """The built module of this machine and code, as ``{"module:kernel": exports}``; None if there is none."""
    directory = (root or cache_root()) / build_key()
    try:
        manifest = json.loads((directory / _MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    name = manifest["module"]
    module = sys.modules.get(name)
    # The name is the build key, the same for a build in another directory (the tests build one):
    # a module of that name is reused only when it was loaded from this directory.
    if module is None or Path(getattr(module, "__file__", "") or ".").parent != directory:
        found = [p for p in directory.iterdir() if p.name.startswith(name + ".") and p.suffix in (".so", ".pyd")]
        if not found:
            return None
        loader = importlib.machinery.ExtensionFileLoader(name, str(found[0]))
        spec = importlib.util.spec_from_file_location(name, found[0], loader=loader)
        if spec is None:
            return None
        module = importlib.util.module_from_spec(spec)
        try:
            loader.exec_module(module)
        except ImportError:
            return None
        sys.modules[name] = module
    _mark_used(directory / _MANIFEST)
    try:
        return {
            qualified: [(getattr(module, export), specs) for export, specs in exports]
            for qualified, exports in manifest["kernels"].items()
        }
    except AttributeError:
        return None  # a manifest of another build than its module (a damaged cache): numba's kernels instead


def _mark_used(manifest: Path) -> None:
    """Set the manifest's mtime to now when it is over a day old (a read-only cache is left as is)."""
    try:
        if time.time() - manifest.stat().st_mtime > _MARK_SECONDS:
            os.utime(manifest)
    except OSError:
        pass


def prune(root: Path | None = None, keep: str | None = None, now: float | None = None) -> list[Path]:
    """Remove the built modules under ``root`` that no process loaded for :data:`STALE_DAYS`.

    Args:
        root: The cache directory (default: :func:`cache_root`).
        keep: A key never removed (default: this machine and code's, :func:`build_key`).
        now: The time to measure ages from (default: now).

    Returns:
        The directories removed. Entries that are not a built module are left alone.

    """
    root = root or cache_root()
    keep = keep or build_key()
    now = time.time() if now is None else now
    removed: list[Path] = []
    try:
        entries = list(root.iterdir())
    except OSError:
        return removed
    for entry in entries:
        if entry.name == keep or not _KEY_NAME.fullmatch(entry.name) or not entry.is_dir():
            continue
        try:
            age = now - (entry / _MANIFEST).stat().st_mtime
        except OSError:
            continue
        if age > STALE_DAYS * 86400:
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed
