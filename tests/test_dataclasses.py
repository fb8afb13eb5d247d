"""kai's dataclass decorator behaves as the standard library's, whose methods it makes
on first use (kai._dataclasses)."""

from __future__ import annotations

import copy
import dataclasses
import pickle
import re
from typing import Any

import pytest

from kai._dataclasses import dataclass

OPTIONS = [
    {},
    {"frozen": True},
    {"slots": True},
    {"frozen": True, "slots": True},
    {"eq": False},
    {"slots": True, "eq": False},
    {"frozen": True, "eq": False},
    {"repr": False},
]


def twins(**options: Any) -> tuple[type, type]:
    """The same class made by kai's decorator and by the standard library's."""

    def body() -> type:
        class Sample:
            """A sample."""

            name: str
            size: int = 1
            tags: list[str] = dataclasses.field(default_factory=list)
            note: str = dataclasses.field(default="", compare=False, repr=False)
            weight: float = dataclasses.field(default=0.5, kw_only=True)

        return Sample

    return dataclass(**options)(body()), dataclasses.dataclass(**options)(body())


def _repr(obj: object) -> str:
    return re.sub(r" at 0x[0-9a-f]+", "", repr(obj))


def behaviour(cls: type, make: Any) -> dict[str, Any]:
    """What a program can observe of ``cls`` and its objects."""
    a, b, c = make(cls, "a"), make(cls, "a"), make(cls, "c")
    out: dict[str, Any] = {
        "repr": _repr(a),
        "equal": (a == b, a == c, a != b, a == "a"),
        "hashable": cls.__hash__ is not None,
        "fields": [
            (f.name, f.default, f.compare, f.repr, f.kw_only) for f in dataclasses.fields(a)
        ],
        "astuple": dataclasses.astuple(a),
        "replace": _repr(dataclasses.replace(a, size=7)),
        "match_args": cls.__match_args__,
        "copy": _repr(copy.deepcopy(a)),
        "slots": hasattr(cls, "__slots__"),
        "eq_method": cls.__eq__ is object.__eq__,
    }
    if out["hashable"]:
        try:
            out["hash"] = (hash(a) == hash(b), hash(a) == hash(make(cls, "a")))
        except TypeError as err:  # a list among the fields
            out["hash"] = str(err)
    try:
        a.size = 3
        out["assign"] = a.size
    except dataclasses.FrozenInstanceError as err:
        out["assign"] = f"frozen: {err}"
    try:
        a.other = 1
        out["assign_other"] = "set"
    except (dataclasses.FrozenInstanceError, AttributeError, TypeError) as err:
        out["assign_other"] = type(err).__name__
    try:
        cls()
    except TypeError as err:
        out["missing"] = str(err)
    return out


def positional(cls: type, name: str) -> Any:
    return cls(name, 2, ["x"], "n", weight=1.5)


def by_keyword(cls: type, name: str) -> Any:
    return cls(name=name)


@pytest.mark.parametrize("options", OPTIONS, ids=repr)
@pytest.mark.parametrize("make", [positional, by_keyword])
def test_a_class_behaves_as_the_standard_librarys(options: dict[str, bool], make: Any) -> None:
    ours, theirs = twins(**options)
    assert behaviour(ours, make) == behaviour(theirs, make)


@pytest.mark.parametrize("options", OPTIONS, ids=repr)
def test_objects_pickle_and_copy_like_the_standard_librarys(options: dict[str, bool]) -> None:
    ours, theirs = twins(**options)
    for cls in (ours, theirs):
        # pickle finds a class by its module and name
        cls.__qualname__ = "Sample"
        globals()["Sample"] = cls
        try:
            obj = positional(cls, "p")
            again = pickle.loads(pickle.dumps(obj))
            assert type(again) is cls
            assert dataclasses.astuple(again) == dataclasses.astuple(obj)
            assert dataclasses.astuple(copy.copy(obj)) == dataclasses.astuple(obj)
        finally:
            del globals()["Sample"]


def test_methods_are_made_on_first_use_and_are_the_standard_librarys() -> None:
    @dataclass(frozen=True)
    class Point:
        x: int
        y: int = 0

    for name in ("__init__", "__repr__", "__eq__", "__hash__"):
        assert not callable(Point.__dict__[name]), name  # not made yet
    point = Point(1)
    assert callable(Point.__dict__["__init__"])
    assert not callable(Point.__dict__["__repr__"])
    assert repr(point).endswith("<locals>.Point(x=1, y=0)")
    assert Point.__init__.__qualname__.endswith("Point.__init__")
    assert {point, Point(1, 0)} == {Point(1)}
    assert Point(1) != Point(2)


def test_a_class_keeps_the_methods_it_defines() -> None:
    @dataclass
    class Named:
        name: str

        def __repr__(self) -> str:
            return f"<{self.name}>"

        def __eq__(self, other: object) -> bool:
            return isinstance(other, Named) and other.name.lower() == self.name.lower()

    assert repr(Named("a")) == "<a>"
    assert Named("A") == Named("a")
    assert Named.__hash__ is None  # as Python and dataclasses leave a class with __eq__

    @dataclass(frozen=True)
    class Keyed:
        key: str
        extra: int = 0

        def __hash__(self) -> int:
            return hash(self.key)

    assert hash(Keyed("k", 1)) == hash("k")


def test_post_init_and_inherited_fields_as_the_standard_library() -> None:
    seen: list[str] = []

    def classes(decorate: Any) -> type:
        @decorate
        class Base:
            a: int
            b: int = 2

            def __post_init__(self) -> None:
                seen.append(f"{type(self).__name__} {self.a}")

        @decorate
        class Child(Base):
            c: int = 3

        return Child

    ours, theirs = classes(dataclass), classes(dataclasses.dataclass)
    assert repr(ours(1, c=5)).rsplit(".", 1)[-1] == repr(theirs(1, c=5)).rsplit(".", 1)[-1]
    assert seen == ["Child 1", "Child 1"]
    assert ours(1) == ours(1, 2, 3) and ours(1) != ours(1, 2, 4)
    # The base's methods are its own: made for the base's fields, not the child's.
    base = ours.__mro__[1]
    assert repr(base(4)).endswith("Base(a=4, b=2)")


def test_kai_objects_made_both_ways_are_alike() -> None:
    """A parsed pod and a queue's resource (slotted and frozen classes) made with their
    generated methods print and compare as the standard library's twins do."""
    from kai.api.objects import QueueResource, Toleration

    a, b = Toleration("k", "Equal", "v", "NoSchedule"), Toleration("k", "Equal", "v", "NoSchedule")
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert repr(a) == "Toleration(key='k', operator='Equal', value='v', effect='NoSchedule')"
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.key = "other"  # type: ignore[misc]
    q = QueueResource(1.0, 2.0, 3.0)
    assert q == QueueResource(1.0, 2.0, 3.0) and q != QueueResource(1.0, 2.0, 4.0)
