"""Compiled fast paths where Python objects are the cost.

Building a session's state from parsed objects (:mod:`kai._fast.build`), collecting
a session's result (:mod:`kai._fast.collect`), converting parsed manifests to typed
objects (:mod:`kai._fast.convert`) and reading a session's jobs into the fused allocate
loop's columns and its placements back (:mod:`kai._fast.loop`) make or read one to
three Python objects per pod; laying a victim-search simulation's participants out in
arrays (:mod:`kai._fast.layout`) makes about twenty small arrays per simulation, and the
search's counting bound (:mod:`kai._fast.bounds`) adds up a dozen batches per scenario;
proportion's queue order (:mod:`kai._fast.order`), which the searches ask several times
per probe, is the native core's rule, called on the plugin's values from Cython built
as C++. These modules are Cython, compiled by the same CMake build as the C++ core.
Each takes the common case and hands anything else (an unusual field, an input error,
a shared GPU) to the pure-Python code it speeds up, which stays the reference: both
give identical results, and the tests hold them to it.

``module(name)`` is the compiled module, or None when it was not built, when
``KAI_PURE_PYTHON`` is set (to anything but ``0`` or empty), or inside
:func:`pure_python`.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType

import numpy as np

NAMES = (
    "bounds",
    "build",
    "collect",
    "convert",
    "layout",
    "leaf",
    "ledger",
    "loop",
    "order",
    "statement",
)

_modules: dict[str, ModuleType | None] = {}
_disabled = os.environ.get("KAI_PURE_PYTHON", "") not in ("", "0")


def _load(name: str) -> ModuleType | None:
    if name not in _modules:
        try:
            _modules[name] = importlib.import_module(f"kai._fast.{name}")
        except ImportError:
            _modules[name] = None
    return _modules[name]


def module(name: str) -> ModuleType | None:
    """The compiled module ``kai._fast.<name>``, or None (see the module docstring)."""
    if _disabled:
        return None
    return _load(name)


def add_at_function() -> Callable[[np.ndarray, np.ndarray, np.ndarray], None]:
    """``np.add.at`` for a float64 target and an int64 index, compiled where
    :mod:`kai._fast.ledger` is (the same additions in the same order, so the same bits:
    numpy's takes ten times as long)."""
    ledger = module("ledger")
    return np.add.at if ledger is None else ledger.add_at


def available() -> list[str]:
    """The compiled modules that were built and load."""
    return [name for name in NAMES if _load(name) is not None]


@contextmanager
def pure_python(enabled: bool = True) -> Iterator[None]:
    """Run the pure-Python paths only while the block runs (``enabled=False``: no-op)."""
    global _disabled
    was = _disabled
    _disabled = _disabled or enabled
    try:
        yield
    finally:
        _disabled = was
