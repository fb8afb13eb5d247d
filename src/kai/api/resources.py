"""Resource vectors.

Every quantity kai schedules on is a float64 vector indexed by a small
:class:`ResourceTable`: cpu (millicores), memory (bytes), gpu (devices, fractions
allowed), pods, then any extended resource the snapshot mentions.  Vectors, not
string-keyed maps, are what the hot paths and the native core see.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from kai.api.objects import GPU_RESOURCE

CPU = 0
MEMORY = 1
GPU = 2
PODS = 3

BASE_RESOURCES = ("cpu", "memory", GPU_RESOURCE, "pods")

# Resources a pod may request that nodes usually do not declare and Kubernetes does
# not fit on unless the node lists them.
_FIT_ONLY_IF_DECLARED = ("ephemeral-storage",)


class ResourceTable:
    """Maps resource names to vector indices for one snapshot."""

    def __init__(self, extended: Iterable[str] = ()) -> None:
        names = list(BASE_RESOURCES)
        for name in sorted(set(extended)):
            if name not in names:
                names.append(name)
        self.names: tuple[str, ...] = tuple(names)
        self.index: dict[str, int] = {n: i for i, n in enumerate(self.names)}

    def __len__(self) -> int:
        return len(self.names)

    def vector(self, quantities: Mapping[str, float]) -> np.ndarray:
        """A vector from a name->quantity map; names outside the table are dropped."""
        vec = np.zeros(len(self.names), dtype=np.float64)
        for name, value in quantities.items():
            i = self.index.get(name)
            if i is not None:
                vec[i] = value
        return vec

    def to_dict(self, vec: np.ndarray, *, skip_zero: bool = True) -> dict[str, float]:
        out = {}
        for name, value in zip(self.names, vec):
            if skip_zero and value == 0:
                continue
            out[name] = float(value)
        return out

    @staticmethod
    def schedulable_resource(name: str, declared_by_nodes: set[str]) -> bool:
        """Whether a requested resource takes part in fitting."""
        if name in BASE_RESOURCES:
            return True
        if name.startswith("hugepages-") or name in _FIT_ONLY_IF_DECLARED:
            return name in declared_by_nodes
        return True


def fits(request: np.ndarray, available: np.ndarray, eps: float = 1e-9) -> bool:
    return bool(np.all(request <= available + eps))


# ------------------------------------------------------------------ fit errors
#: What a fit error counts the nodes by that lack a resource the pod requests.
INSUFFICIENT_RESOURCES = "insufficient resources"


def format_quantity(name: str, value: float) -> str:
    """A quantity as a pod spec writes it: cpu in cores or millicores, memory in Ki..Gi."""
    if name == "cpu":
        return f"{value / 1000:g}" if value % 1000 == 0 else f"{value:g}m"
    if name == "memory" or name == "ephemeral-storage" or name.startswith("hugepages-"):
        for unit, size in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if abs(value) >= size:
                return f"{round(value / size, 2):g}{unit}"
        return f"{value:g}"
    return f"{value:g}"


def nodes_text(count: int) -> str:
    return f"{count} node" if count == 1 else f"{count} nodes"


def describe_shortage(entries: list[tuple[str, int, str, str]]) -> str:
    """What the nodes rejected for resources lack, the most common shortage first.

    ``entries``: (resource, nodes short of it, what the pod needs, the most any of those
    nodes had free).  E.g. ``nvidia.com/gpu on 8 nodes: needs 4, at most 2 free``.
    """
    ordered = sorted(entries, key=lambda e: -e[1])  # stable: resource order among equals
    return "; ".join(
        f"{name} on {nodes_text(count)}: needs {needs}, at most {free} free"
        for name, count, needs, free in ordered
    )


def vector_shortage(
    names: tuple[str, ...], request: np.ndarray, short: np.ndarray, most_free: np.ndarray
) -> list[tuple[str, int, str, str]]:
    """:func:`describe_shortage` entries of a resource request.

    ``short[r]``: the nodes short of resource r; ``most_free[r]``: the most (idle plus
    releasing) any of them had.
    """
    return [
        (
            names[r],
            int(short[r]),
            format_quantity(names[r], float(request[r])),
            format_quantity(names[r], float(most_free[r])),
        )
        for r in np.flatnonzero(short)
    ]


def describe_failures(failures: dict[str, int], total: int, shortage: str = "") -> str:
    """``0/8 nodes are available: 6 insufficient resources (...), 2 node(s) had ...``.

    ``shortage`` (Session.resource_shortage) says which resources the nodes counted as
    insufficient lack; it follows their count in parentheses.
    """
    if not failures:
        return f"0/{total} nodes are available"
    parts = ", ".join(
        f"{count} {reason}"
        + (f" ({shortage})" if shortage and reason == INSUFFICIENT_RESOURCES else "")
        for reason, count in sorted(failures.items(), key=lambda kv: (-kv[1], kv[0]))
    )
    return f"0/{total} nodes are available: {parts}"
