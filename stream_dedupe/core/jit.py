"""Kernels that import numba only when the work repays it.

Importing numba and loading the cached machine code costs about 0.7 s of CPU, more than deduping
a small file takes. ``@njit`` from this module marks a function as a numba kernel *without*
importing numba: until :func:`enable` is called, a call runs a pure numpy/Python implementation
(the ``pure=`` function when one is given, else the kernel's own Python code, which numba code
is). :func:`enable` imports numba, compiles (or loads from numba's on-disk cache) every kernel,
and rebinds the module globals to numba's dispatchers, so compiled kernels call each other
natively and later calls pay no indirection.

Where ``python -m stream_dedupe.warmup`` built the ahead-of-time module for this machine
(:mod:`stream_dedupe.core.aot`), :func:`enable` loads it instead of numba (under a millisecond),
and numba is imported only for a call that module cannot take.

Every pure implementation gives the same results bit for bit (``tests/test_pure_kernels.py``
checks them against the compiled kernels and against datasketch). Who enables numba: the
signer, for a batch big enough to repay it or any batch when the ahead-of-time module is built
(:func:`note_batch`), the command line for a big input
or state, or for any input when the ahead-of-time module is built (which otherwise holds the
process pure: :func:`choose`, :func:`stay_pure`),
:func:`stream_dedupe.warmup.warm`, and, as a backstop for any other caller, the
:data:`PURE_CALLS` th call of a kernel in pure mode.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar, overload

F = TypeVar("F", bound=Callable[..., Any])

#: Documents in one signing batch from which numba is enabled (measured: the pure path signs a
#: ~1.8 KB document in ~0.28 ms, the compiled one in ~0.045 ms, and numba's import and cached
#: kernels cost ~0.7 s once; a full batch usually means more input behind it).
SIGN_DOCS = 64
#: Kernel calls in pure mode after which numba is enabled anyway (a long run of tiny batches).
PURE_CALLS = 4096

#: ``STREAM_DEDUPE_JIT``: ``auto`` (default), ``on`` (numba from the first kernel call, never the
#: ahead-of-time module) or ``off`` (pure unless :func:`enable` is called: for tests and measurements).
MODE = os.environ.get("STREAM_DEDUPE_JIT", "auto")

_lock = threading.RLock()  # enable_numba() may run inside a kernel call made under it
_enabled = False
_auto = MODE != "off"
_pure_calls = 0
_kernels: list[LazyKernel] = []
_aot: dict[str, Any] | None = None  # the ahead-of-time module's exports while they are in use
_aot_tried = False  # note_batch looked for the ahead-of-time module once already


class LazyKernel:
    """A numba kernel that runs its pure implementation until :func:`enable`.

    Args:
        py_func: The kernel (numba-compatible Python).
        options: Options for ``numba.njit``.
        pure: A faster pure implementation with the same results, or None to run ``py_func``.

    """

    def __init__(self, py_func: Callable[..., Any], options: dict[str, Any], pure: Callable[..., Any] | None) -> None:
        self.py_func = py_func
        self.options = options
        self.pure = pure or py_func
        self.twin = pure  # None: the kernel's own code is its pure form (valid where pure mode calls it)
        self.dispatcher: Any = None
        functools.update_wrapper(self, py_func)

    def __call__(self, *args: Any) -> Any:
        """Run the compiled kernel when numba is enabled, else the pure implementation."""
        global _pure_calls
        if not _enabled:
            _pure_calls += 1
            if (_pure_calls <= PURE_CALLS and MODE != "on") or not _auto:
                return self.pure(*args)
            enable()
        return self.dispatcher(*args)


@overload
def njit(func: F, /) -> F: ...
@overload
def njit(*, pure: Callable[..., Any] | None = None, **options: Any) -> Callable[[F], F]: ...
def njit(func: Callable[..., Any] | None = None, /, *, pure: Callable[..., Any] | None = None, **options: Any) -> Any:
    """``numba.njit`` without importing numba: ``@njit``, ``@njit(cache=True)``, ``@njit(pure=f)``.

    Args:
        func: The kernel, when used as a bare decorator.
        pure: A pure numpy/Python implementation with bit-identical results (default: the
            kernel's own code, run by the interpreter).
        options: Options for ``numba.njit`` (``cache``, ``inline``, ...).

    Returns:
        A :class:`LazyKernel` (a numba dispatcher if numba is already enabled), or a decorator;
        typed as the function itself, which it is called like.

    """

    def wrap(py_func: Callable[..., Any]) -> Any:
        kernel = LazyKernel(py_func, options, pure)
        with _lock:
            _kernels.append(kernel)
            if _enabled:
                if _aot is not None:
                    _bind_aot(kernel, _aot)
                    return kernel
                return _compile(kernel)
        return kernel

    return wrap(func) if func is not None else wrap


def _import_numba() -> None:
    """Import numba and its CPU target's array library without the scipy import of its BLAS probe.

    ``numba.np.arraymath``, loaded with the CPU target at the first compile or cache load, sets
    its ``_HAVE_BLAS`` flag by importing ``scipy.linalg.cython_blas``: 0.25 s of CPU in every
    process that enables numba (scipy is installed as datasketch's dependency), for kernels that
    use no BLAS. The probe is answered "no" by hiding scipy while that one module is imported
    (about 20 ms; :func:`enable` holds the lock, and a thread importing scipy at that moment would
    get an ImportError). The flag only picks BLAS for the inner products of ``np.correlate`` and
    ``np.convolve`` in compiled code; ``np.dot`` still imports scipy when a kernel using it
    compiles, and scipy imports as usual afterwards (``tests/test_startup.py``). Nothing is hidden
    when scipy.linalg is already imported (there is nothing to save).
    """
    import numba

    if "numba.np.arraymath" in sys.modules or "scipy.linalg" in sys.modules:
        return
    hidden = "scipy.linalg" if "scipy" in sys.modules else "scipy"
    sys.modules[hidden] = None  # type: ignore[assignment]  # an import of it raises ImportError at once
    try:
        import numba.np.arraymath  # noqa: F401
    finally:
        if sys.modules.get(hidden, 0) is None:
            del sys.modules[hidden]


def _compile(kernel: LazyKernel) -> Any:
    import numba

    kernel.dispatcher = numba.njit(**kernel.options)(kernel.py_func)
    return kernel.dispatcher


def enable() -> None:
    """Switch every kernel (present and future) to its compiled form (idempotent).

    The ahead-of-time module built for this machine (:mod:`stream_dedupe.core.aot`) when there
    is one: no numba import. Else numba: each kernel is compiled, or loaded from numba's cache,
    on its first call.
    """
    global _enabled
    if _enabled:
        return
    with _lock:
        if _enabled:
            return
        if not enable_ahead_of_time():
            _enable_numba_locked()
            _enabled = True


def enable_numba() -> None:
    """Like :func:`enable`, with numba's dispatchers even where the ahead-of-time module has the kernel.

    Called for a call that fits no exported signature, and to build that module.
    """
    global _enabled, _aot
    with _lock:
        if _enabled and _aot is None:
            return
        _enable_numba_locked()
        _aot = None
        _enabled = True


def _enable_numba_locked() -> None:
    _import_numba()
    for kernel in _kernels:
        _compile(kernel)
    for kernel in _kernels:  # compiled callers resolve their callees through the module globals
        module = sys.modules[kernel.py_func.__module__]
        if getattr(module, kernel.py_func.__name__, None) is kernel:
            setattr(module, kernel.py_func.__name__, kernel.dispatcher)


def _load_aot() -> dict[str, Any] | None:
    from stream_dedupe.core import aot

    if not aot.enabled_by_env() or MODE == "on":
        return None
    return aot.load()


def _bind_aot(kernel: LazyKernel, exports: dict[str, Any]) -> None:
    from stream_dedupe.core.aot import AotKernel

    def numba_call(*args: Any) -> Any:
        enable_numba()
        return kernel.dispatcher(*args)

    found = exports.get(f"{kernel.py_func.__module__}:{kernel.py_func.__name__}")
    # a misfit runs the pure twin when the kernel has one (a kernel without one may rely on numba's
    # integer semantics: its own code is run pure only by callers that pure mode has too)
    kernel.dispatcher = AotKernel(found or [], kernel.twin or numba_call, numba_call)


def kernel_mode() -> str:
    """How the kernels run in this process: ``ahead-of-time``, ``numba`` or ``pure``."""
    if not _enabled:
        return "pure"
    return "ahead-of-time" if _aot is not None else "numba"


def aot_active() -> bool:
    """True while the kernels run from the ahead-of-time module (numba not imported for them)."""
    return _enabled and _aot is not None


def note_batch(docs: int) -> None:
    """Compiled kernels for a signing batch: numba from :data:`SIGN_DOCS` documents, the ahead-of-time module for any.

    A smaller batch (the Python API deciding a few documents at a time) loads the ahead-of-time
    module when this machine has one (about a millisecond, tried once a process): it is faster
    than the pure kernels from the first document. Nothing changes when the process is held pure
    (:func:`stay_pure`, ``STREAM_DEDUPE_JIT=off``).
    """
    global _aot_tried
    if not _auto or _enabled:
        return
    if docs >= SIGN_DOCS or MODE == "on":
        enable()
    elif not _aot_tried:
        _aot_tried = True
        enable_ahead_of_time()


#: Input plus state bytes from which the command line enables numba up front (measured on ~1.8 KB
#: documents, BENCHMARKS.md "Start-up": below ~2,000 documents the pure path finishes first).
INPUT_BYTES = 4 << 20


def choose(input_bytes: int | None, state_bytes: int) -> None:
    """For a run over a known amount of data: compiled kernels up front when they are cheap or it is big.

    The ahead-of-time module, when this machine has one, loads in about a millisecond and is
    faster than the pure kernels from the first document (a one-line run costs the same, 1,000
    near copies of one page take 6 s instead of 18 s: BENCHMARKS.md, "One large group of
    copies"), so it is used for any run. Without it, a small run stays pure throughout: numba's
    import would cost more than the run.

    Args:
        input_bytes: Bytes of input (None: unknown, standard input; the batches decide then).
        state_bytes: Bytes of the existing state (its band tables are rebuilt at start-up).

    """
    if MODE == "off" or input_bytes is None:
        return
    if MODE == "on" or input_bytes + state_bytes >= INPUT_BYTES:
        enable()
    elif not enable_ahead_of_time():
        stay_pure()


def enable_ahead_of_time() -> bool:
    """Enable the kernels from the ahead-of-time module if this machine has one (numba is not imported).

    Returns:
        True when the kernels now run compiled (also when they already did), False when there is
        no ahead-of-time module to load (nothing changes then).

    """
    global _enabled, _aot
    with _lock:
        if _enabled:
            return True
        exports = _load_aot()
        if exports is None:
            return False
        _aot = exports
        for kernel in _kernels:
            _bind_aot(kernel, exports)
        _enabled = True
        return True


def stay_pure() -> None:
    """Never enable numba by itself in this process (the caller knows the whole input is small).

    :func:`enable` still works.
    """
    global _auto
    _auto = False


def enabled() -> bool:
    """True once numba is imported and the kernels run compiled."""
    return _enabled


def kernels() -> list[LazyKernel]:
    """Every kernel declared so far (their ``dispatcher`` is set once numba is enabled)."""
    return list(_kernels)
