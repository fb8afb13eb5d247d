"""Keep the memory one session frees for the next one.

A session builds its state (tasks, jobs, decisions: a few hundred bytes per pod),
reports, and frees it all.  Left to their defaults, CPython's small-object allocator
returns every emptied 1 MiB arena to the operating system and glibc's ``malloc`` trims
its heap and unmaps large blocks, so the next session maps the same memory again and
takes a page fault on each first write.  On a virtual machine a fault costs 2-3 us:
about a tenth of a session at 1,000 nodes and at 100,000 pods.

:func:`retain_memory` keeps that memory for reuse, up to a budget: the native core puts
a cache in front of the interpreter's arena allocator, and glibc is told to keep its
freed heap.  The process then holds its peak session's memory, as a long-running
scheduler needs it again at the next cycle.  ``kai run``, ``kai simulate`` and
``kai bench`` call it; an embedding application may call it too.  The environment
variable ``KAI_RETAIN_MEMORY_MIB`` sets the budget (0 turns it off).

:class:`CycleCollector` keeps CPython's cyclic garbage collector off the objects a
long-running scheduler holds for its whole life (the cluster cache and its conversions).
"""

from __future__ import annotations

import ctypes
import gc
import os
import platform
import sysconfig
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

from kai.api.errors import InputError

ENV_VAR = "KAI_RETAIN_MEMORY_MIB"
DEFAULT_MIB = 1024

# mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
# glibc keeps blocks below this size in its heap instead of mapping each one on its own.
_MMAP_THRESHOLD = 32 << 20


@contextmanager
def gc_paused(*, promote: bool = False) -> Iterator[None]:
    """No cyclic garbage collection inside (one already paused stays paused).

    For work that makes many objects and no garbage cycles (loading a snapshot, a
    session, writing its result): the collector's passes would walk the whole growing
    heap and find nothing.

    With ``promote``, what the work made and still holds goes to the oldest generation
    when the pause ends (:func:`promote_survivors`): a session's result, a loaded
    snapshot.  Otherwise the first allocation after the pause starts a young-generation
    pass over every one of those objects (the pause does not stop the allocation count),
    which for a session of 100 nodes and 500 jobs costs a tenth of the session."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            if promote:
                promote_survivors()
            gc.enable()


def promote_survivors() -> None:
    """Move every object the cyclic collector tracks to its oldest generation without a
    pass, and reset the count of allocations that starts the next young pass.

    ``gc.freeze`` then ``gc.unfreeze`` do exactly that, each in constant time.  The
    objects moved are those a pass would find alive; a garbage cycle among them is
    collected by the next full pass.  Skipped while anything is frozen (``kai run``'s
    :class:`CycleCollector`, or an application that froze its objects before forking):
    unfreezing would hand those objects back to the collector.  On a free-threaded
    interpreter, which has no generations to move, it does nothing."""
    if not FREEZE_IS_CHEAP or gc.get_freeze_count():
        return
    gc.freeze()
    gc.unfreeze()


#: Whether ``gc.freeze`` moves the collector's lists in constant time: not on a
#: free-threaded interpreter, which marks every object instead.
FREEZE_IS_CHEAP = not sysconfig.get_config_var("Py_GIL_DISABLED")


def budget_mib() -> int:
    """The budget from ``KAI_RETAIN_MEMORY_MIB`` (default 1024 MiB)."""
    raw = os.environ.get(ENV_VAR, "").strip()
    if not raw:
        return DEFAULT_MIB
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise InputError(f"{raw!r} is not a whole number of MiB >= 0", obj=ENV_VAR)
    return value


def retain_memory(max_mib: int | None = None) -> dict[str, bool]:
    """Keep up to ``max_mib`` MiB of freed memory for reuse (None: :func:`budget_mib`).

    Returns which allocators took it: ``arenas`` (needs the native core) and ``malloc``
    (needs glibc).  With 0 both go back to returning memory at once.
    """
    mib = budget_mib() if max_mib is None else max_mib
    if mib < 0:
        raise ValueError(f"max_mib must be >= 0, got {mib}")
    limit = mib << 20
    return {"arenas": _retain_arenas(limit), "malloc": _tune_malloc(limit)}


def _retain_arenas(limit: int) -> bool:
    try:
        from kai import _native
    except ImportError:
        return False
    retain = getattr(_native, "retain_arenas", None)
    if retain is None:
        return False
    retain(limit)
    return True


def _tune_malloc(limit: int) -> bool:
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the process's own symbols: glibc's malloc
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    if limit == 0:  # glibc's initial thresholds (fixed: they no longer adapt)
        return bool(mallopt(_M_TRIM_THRESHOLD, 128 << 10) and mallopt(_M_MMAP_THRESHOLD, 128 << 10))
    trim = min(limit, 2**31 - 1)
    return bool(mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD) and mallopt(_M_TRIM_THRESHOLD, trim))


class CycleCollector:
    """When the cyclic collector runs in ``kai run``.

    The live cache holds every node and pod of the cluster, parsed and converted: a few
    million objects that live as long as the process and hold no garbage cycles.  Left
    to its defaults the collector walks all of them at each full pass, which its
    thresholds start every time the heap grows by a quarter.  Starting and filling the
    cache and the first cycles ran eight passes of 50 to 180 ms at 1,000 nodes and
    5,000 pods, with nothing to collect, holding the GIL the bind workers and the
    watches need.

    So the scheduler runs each cycle with the collector paused (:meth:`paused`), then
    collects once what the cycle and the watches left and moves the survivors out of
    the collector's sight (:meth:`settle`, ``gc.freeze``).  A frozen object is still
    freed when its last reference goes; only a garbage cycle among frozen objects would
    stay, so every ``full_every`` seconds :meth:`settle` gives them all back to the
    collector first (one full pass).  :meth:`release` gives them back for good.
    """

    def __init__(
        self, full_every: float = 600.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.full_every = full_every
        self.clock = clock
        self._last_full: float | None = None

    def paused(self) -> AbstractContextManager[None]:
        """No collection inside (one already paused stays paused)."""
        return gc_paused()

    def settle(self) -> None:
        """Collect the garbage cycles of the objects made since the last call (of all
        objects, every ``full_every`` seconds), and freeze the objects left."""
        now = self.clock()
        if self._last_full is None or now - self._last_full >= self.full_every:
            gc.unfreeze()
            self._last_full = now
        gc.collect()
        gc.freeze()

    def release(self) -> None:
        """Give every frozen object back to the collector (the scheduler stops)."""
        gc.unfreeze()
        self._last_full = None
