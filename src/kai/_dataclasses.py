"""``dataclass``: the standard library's dataclasses, with their methods made on first use.

Python 3.11 compiles each method a dataclass generates (``__init__``, ``__repr__``,
``__eq__``, ``__hash__``) from source text when the class is defined, a tenth of a
millisecond or more apiece. kai defines about sixty dataclasses, so ``import kai`` spent
over a third of its own time compiling some two hundred methods, of which a ``kai
simulate`` calls about twenty.

This decorator has :func:`dataclasses.dataclass` process the class as usual (fields,
slots, a frozen class's ``__setattr__`` and ``__delattr__``, ``__hash__ = None`` where
the standard library sets it) but leaves a placeholder where each of those four methods
goes. The first lookup of one (a call, ``repr``, ``==``, ``hash``) has
:func:`dataclasses.dataclass` make it, for a class with the same fields and options,
and puts it on the class in place of the placeholder. The methods are the standard
library's, so a class behaves as a plain dataclass does; only its
``__dataclass_params__`` says that these methods were not generated with it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, overload

if TYPE_CHECKING:
    from typing_extensions import dataclass_transform
else:  # what it does at run time: nothing a program reads (typing's is 3.11+)

    def dataclass_transform(**_: Any) -> Callable[[Any], Any]:
        return lambda function: function


_T = TypeVar("_T", bound=type)

# The methods made on first use, each with the dataclass option that asks for it.
_DEFERRED = (("__init__", "init"), ("__repr__", "repr"), ("__eq__", "eq"))


class _Deferred:
    """Where a generated method of ``owner`` goes until its first lookup makes it."""

    __slots__ = ("name", "owner")

    def __init__(self, owner: type, name: str) -> None:
        self.owner = owner
        self.name = name

    def __get__(self, obj: object, objtype: type | None = None) -> Any:
        method = _make(self.owner, self.name)
        return method.__get__(obj, objtype)


def _make(owner: type, name: str) -> Callable[..., Any]:
    """Method ``name`` as :func:`dataclasses.dataclass` makes it for ``owner``, put on
    ``owner``: generated for a class with ``owner``'s fields (inherited ones included,
    in their order) and options, and only that method."""
    fields: dict[str, dataclasses.Field[Any]] = owner.__dataclass_fields__  # type: ignore[attr-defined]
    namespace: dict[str, Any] = {
        "__module__": owner.__module__,
        "__qualname__": owner.__qualname__,
        "__annotations__": {key: f.type for key, f in fields.items()},
        **fields,
    }
    options = {"init": False, "repr": False, "eq": False}
    if name == "__hash__":
        options["unsafe_hash"] = True
    else:
        options[name.strip("_")] = True
    if name == "__init__":
        options["frozen"] = owner.__dataclass_params__.frozen  # type: ignore[attr-defined]
        post_init = getattr(owner, "__post_init__", None)
        if post_init is not None:
            namespace["__post_init__"] = post_init
    model: type = dataclasses.dataclass(type(owner.__name__, (), namespace), **options)
    method: Callable[..., Any] = model.__dict__[name]
    setattr(owner, name, method)
    return method


@overload
def dataclass(cls: _T, /) -> _T: ...


@overload
def dataclass(
    *,
    init: bool = True,
    repr: bool = True,
    eq: bool = True,
    frozen: bool = False,
    slots: bool = False,
) -> Callable[[_T], _T]: ...


@dataclass_transform(field_specifiers=(dataclasses.field, dataclasses.Field))
def dataclass(
    cls: _T | None = None,
    /,
    *,
    init: bool = True,
    repr: bool = True,  # noqa: A002 - the option's name in dataclasses.dataclass
    eq: bool = True,
    frozen: bool = False,
    slots: bool = False,
) -> _T | Callable[[_T], _T]:
    """:func:`dataclasses.dataclass` with these options, its ``__init__``,
    ``__repr__``, ``__eq__`` and ``__hash__`` made on first use (see the module)."""
    wanted = {"init": init, "repr": repr, "eq": eq}

    def wrap(cls: _T) -> _T:
        own = dict(cls.__dict__)
        made: _T = dataclasses.dataclass(  # type: ignore[assignment]
            cls, init=False, repr=False, eq=False, frozen=frozen, slots=slots
        )
        deferred = [name for name, option in _DEFERRED if wanted[option] and name not in own]
        # __hash__ as the standard library decides it for eq=True (without unsafe_hash):
        # kept if the class defines it, made for a frozen class, None for another.
        explicit_hash = "__hash__" in own and not (own["__hash__"] is None and "__eq__" in own)
        if eq and not explicit_hash:
            if frozen:
                deferred.append("__hash__")
            else:
                made.__hash__ = None  # type: ignore[assignment]
        for name in deferred:
            setattr(made, name, _Deferred(made, name))
        return made

    return wrap if cls is None else wrap(cls)
