"""When the cyclic garbage collector runs in a long-running scheduler
(``kai.memory.CycleCollector``)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from kai.memory import CycleCollector


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
