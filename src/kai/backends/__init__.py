"""Numeric kernel backends of the kai scheduler.

Three interchangeable implementations of the same kernels, giving identical results:

* ``native`` - C++ extension :mod:`kai._native` (pybind11, GIL released);
* ``numba``  - ``@njit(cache=True)`` kernels, compiled lazily on first use;
* ``python`` - plain numpy/Python reference (the specification).

Usage::

    from kai.backends import get_backend
    be = get_backend()            # KAI_BACKEND env var, else native > numba > python
    fits_any, fits_idle = be.fit_mask(request, idle, releasing)

Conventions: resource vectors have R columns (0 cpu millicores, 1 memory bytes, 2 gpu,
3 pods, 4.. extended); node matrices are N x R float64; masks are numpy bool arrays.
Inputs are never modified.

Kernels (see :mod:`kai.backends.python_backend` for exact semantics):
``fit_mask``, ``binpack_score``, ``spread_score``, ``best_node``, ``ordered_nodes``,
``dominant_share``, ``divide_fair_share``, ``divide_fair_share_tree``, and the
load-aware and victim-search kernels.

Adding a kernel ``foo``:
  1. reference implementation ``foo`` in ``python_backend.py`` (argument prep helper in
     ``_common.py`` if it takes arrays), and its name in ``_common.KERNELS`` (+ a stub in
     the ``Backend`` protocol);
  2. ``@njit(cache=True)`` kernel in ``_numba_kernels.py`` + wrapper in ``numba_backend.py``
     (a loop that plain Python runs fast enough on lists can be written once, as
     ``_fair_share.divide`` is, and compiled there as it is);
  3. C++ in ``native/include/kai/<area>.hpp`` + ``native/src/<area>.cpp`` (new sources go
     in ``KAI_NATIVE_SOURCES`` in CMakeLists.txt), binding in
     ``native/bindings/<area>.cpp``, its stub in ``kai/_native.pyi``, wrapper in
     ``native_backend.py``;
  4. randomized equivalence tests in ``tests/test_backends.py``.
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
from typing import cast

from kai.backends._common import EPS, KERNELS, UNLIMITED, Backend, KernelSet

__all__ = [
    "EPS",
    "KERNELS",
    "UNLIMITED",
    "BACKEND_NAMES",
    "Backend",
    "BackendUnavailableError",
    "available_backends",
    "get_backend",
]

#: All backend names, in default preference order.
BACKEND_NAMES: tuple[str, ...] = ("native", "numba", "python")

#: Environment variable selecting the backend when ``get_backend()`` gets no name.
ENV_VAR = "KAI_BACKEND"

_MODULES = {
    "native": "kai.backends.native_backend",
    "numba": "kai.backends.numba_backend",
    "python": "kai.backends.python_backend",
}

#: The extra that installs what a backend needs, for the error that says it is missing.
_EXTRAS = {"numba": "numba"}

_cache: dict[str, Backend] = {}
_lock = threading.Lock()
_default: str | None = None  # the backend get_backend() picks without a name or $KAI_BACKEND
_log = logging.getLogger(__name__)


class BackendUnavailableError(ImportError):
    """A known backend was requested but cannot be loaded in this environment."""


def _check_name(name: str) -> str:
    key = name.strip().lower()
    if key not in BACKEND_NAMES:
        raise ValueError(
            f"unknown kai backend {name!r}; expected one of: {', '.join(BACKEND_NAMES)}"
        )
    return key


def _load(name: str) -> Backend:
    """Instantiate (once) the backend ``name``; raise BackendUnavailableError if impossible."""
    with _lock:
        backend = _cache.get(name)
        if backend is not None:
            return backend
        try:
            module = importlib.import_module(_MODULES[name])
            if name == "numba":
                importlib.import_module("numba")  # verify numba works, kernels stay lazy
        except ImportError as exc:
            extra = _EXTRAS.get(name)
            if extra is not None and exc.name == extra:
                message = f"kai backend {name!r} needs {extra}: pip install 'kai[{extra}]'"
            else:
                message = f"kai backend {name!r} is not available: {exc}"
            raise BackendUnavailableError(message) from exc
        # KernelSet sets its kernels as attributes, after checking that none is missing.
        backend = cast(Backend, KernelSet(name, module))
        _cache[name] = backend
        return backend


def get_backend(name: str | None = None) -> Backend:
    """Return the (cached) kernel backend ``name``.

    ``name`` None -> ``$KAI_BACKEND`` if set, else the first loadable of native, numba,
    python.  Unknown names raise ValueError; a known but unloadable backend raises
    BackendUnavailableError (an ImportError).
    """
    if name is None:
        env = os.environ.get(ENV_VAR, "").strip()
        if env:
            return _load(_check_name(env))
        return _load(_default or _pick_default())
    return _load(_check_name(name))


def _pick_default() -> str:
    """The first loadable backend; logged once, with why the faster ones were passed over."""
    global _default
    skipped = []
    for candidate in BACKEND_NAMES:
        try:
            _load(candidate)
        except BackendUnavailableError as exc:
            skipped.append(str(exc))
            continue
        _default = candidate
        _log.debug("kai backend %r by default%s", candidate, "".join(f"; {s}" for s in skipped))
        return candidate
    raise AssertionError("unreachable: the python backend always loads")


def available_backends() -> list[str]:
    """Names of the backends that can be loaded here, in preference order."""
    names = []
    for candidate in BACKEND_NAMES:
        try:
            _load(candidate)
        except BackendUnavailableError:
            continue
        names.append(candidate)
    return names
