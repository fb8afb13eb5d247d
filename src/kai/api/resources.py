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
