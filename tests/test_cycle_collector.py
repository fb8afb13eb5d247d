"""When the cyclic garbage collector runs: in a long-running scheduler
(``kai.memory.CycleCollector``), and after a paused session or load
(``kai.memory.gc_paused(promote=True)``)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from kai.memory import FREEZE_IS_CHEAP, CycleCollector, gc_paused


class _Cycle:
    """A garbage cycle whose collection is seen through a weak reference."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture
def collector() -> Iterator[tuple[CycleCollector, list[float]]]:
    now = [0.0]
    c = CycleCollector(full_every=600.0, clock=lambda: now[0])
    try:
        yield c, now
    finally:
        c.release()


def test_settle_collects_recent_cycles_and_freezes_the_rest(collector):
    c, _ = collector
    garbage = _Cycle()
    gone = weakref.ref(garbage)
    del garbage
    kept = [_Cycle() for _ in range(100)]
    c.settle()
    assert gone() is None  # collected: it was garbage before the freeze
    assert gc.get_freeze_count() >= len(kept)
    young = {id(obj) for obj in gc.get_objects()}  # the generations, not the frozen
    assert not any(id(obj) in young for obj in kept)


def test_a_frozen_cycle_is_collected_at_the_next_full_pass(collector):
    c, now = collector
    c.settle()
    frozen = _Cycle()
    c.settle()  # frozen now
    gone = weakref.ref(frozen)
    del frozen
    gc.collect()
    assert gone() is not None  # out of the collector's sight
    now[0] += 300.0
    c.settle()
    assert gone() is not None  # not yet time for a full pass
    now[0] += 300.0
    c.settle()
    assert gone() is None


def test_paused_pauses_and_restores(collector):
    c, _ = collector
    assert gc.isenabled()
    with c.paused():
        assert not gc.isenabled()
        with c.paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer pause holds
    assert gc.isenabled()


def test_release_gives_every_object_back(collector):
    c, _ = collector
    c.settle()
    assert gc.get_freeze_count() > 0
    c.release()
    assert gc.get_freeze_count() == 0


#: The promotion moves objects between the generations of CPython's default collector.
generational = pytest.mark.skipif(
    not FREEZE_IS_CHEAP, reason="a free-threaded interpreter's collector has no generations"
)


def _generation_of(obj: object) -> int | None:
    """The collector's generation holding ``obj`` (None: untracked or frozen)."""
    for generation in range(3):
        if any(o is obj for o in gc.get_objects(generation)):
            return generation
    return None


@generational
def test_a_promoting_pause_moves_what_it_made_to_the_oldest_generation():
    assert gc.isenabled() and gc.get_freeze_count() == 0
    with gc_paused(promote=True):
        made = [_Cycle() for _ in range(2_000)]  # more than a young pass's threshold
        garbage = _Cycle()
        gone = weakref.ref(garbage)
        del garbage
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0  # nothing left frozen
    assert gc.get_count()[0] < 100  # no young pass is due for what the pause made
    assert _generation_of(made[0]) == 2 and _generation_of(made[-1]) == 2
    assert gone() is not None  # promoted with the rest ...
    gc.collect()
    assert gone() is None  # ... and collected by the next full pass


@generational
def test_a_plain_pause_leaves_its_objects_young():
    with gc_paused():
        made = [_Cycle() for _ in range(10)]
    assert _generation_of(made[0]) == 0


@generational
def test_a_promoting_pause_leaves_frozen_objects_frozen():
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with gc_paused(promote=True):
            made = _Cycle()
        # Not handed back to the collector: a promotion would leave nothing frozen.  The
        # count may drop, as frozen objects die (freed by other tests' threads too).
        assert 0 < gc.get_freeze_count() <= frozen
        assert _generation_of(made) == 0
    finally:
        gc.unfreeze()


@generational
def test_a_session_result_is_not_walked_by_a_young_pass():
    """The objects of a session's result start in the oldest generation: the pass that
    the first allocation after the session would start finds nothing due."""
    from kai import bench_clusters as gen
    from kai.engine import Snapshot, run_session

    snap = Snapshot(gen.kai_topology("small", "mixed").objects())
    result = run_session(snap, actions=["allocate"], now=gen.NOW)
    assert result.decisions
    assert gc.get_count()[0] < 100
    assert _generation_of(result.decisions[0]) == 2
