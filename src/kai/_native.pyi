# Stubs of the compiled core (native/bindings/*.cpp, pybind11).
# Arrays are converted to C-contiguous arrays of the dtype named; kai.backends.native_backend
# wraps the kernels with the Python backends' interface.
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

__version__: str
EPS: float

# fit
def fit_mask(
    request: ArrayLike, idle: ArrayLike, releasing: ArrayLike
) -> tuple[NDArray[np.bool_], NDArray[np.bool_]]: ...

# score
def binpack_score(
    non_allocated: ArrayLike, allocatable: ArrayLike, candidates: ArrayLike, max_score: float
) -> NDArray[np.float64]: ...
def spread_score(non_allocated: ArrayLike, capacity: ArrayLike) -> NDArray[np.float64]: ...
def best_node(scores: ArrayLike, mask: ArrayLike) -> int: ...
def ordered_nodes(scores: ArrayLike, mask: ArrayLike) -> NDArray[np.int64]: ...

# fairshare
def dominant_share(allocated: ArrayLike, total: ArrayLike) -> NDArray[np.float64]: ...
def divide_fair_share(
    total: float,
    deserved: ArrayLike,
    limit: ArrayLike,
    weight: ArrayLike,
    request: ArrayLike,
    priority: ArrayLike,
    rank: ArrayLike,
    k_value: float,
    usage: ArrayLike,
) -> NDArray[np.float64]: ...
def divide_fair_share_tree(
    total: ArrayLike,
    parent: ArrayLike,
    deserved: ArrayLike,
    limit: ArrayLike,
    weight: ArrayLike,
    request: ArrayLike,
    priority: ArrayLike,
    rank: ArrayLike,
    k_value: float,
    usage: ArrayLike,
) -> NDArray[np.float64]: ...

# loadaware
def loadaware_filter(
    existing: ArrayLike,
    incoming: ArrayLike,
    allocatable: ArrayLike,
    thresholds: ArrayLike,
    state: ArrayLike,
) -> tuple[NDArray[np.bool_], NDArray[np.int64]]: ...
def loadaware_score(
    existing: ArrayLike,
    incoming: ArrayLike,
    allocatable: ArrayLike,
    weights: ArrayLike,
    dominant_weight: int,
    valid: ArrayLike,
) -> NDArray[np.int64]: ...

# memory
def retain_arenas(max_bytes: int) -> None: ...
def cached_arena_bytes() -> int: ...

# solver
def idle_gpus_fit(capacity: ArrayLike, requests: ArrayLike) -> bool: ...
def scenario_fit(available: ArrayLike, requests: ArrayLike, gpu_column: int) -> bool: ...

class IncrementalFit:
    def __init__(
        self,
        capacity: ArrayLike,
        available: ArrayLike,
        gpu_requests: ArrayLike,
        requests: ArrayLike,
        gpu_column: int,
    ) -> None: ...
    def set_capacity(self, nodes: ArrayLike, values: ArrayLike) -> None: ...
    def add_available(self, nodes: ArrayLike, rows: ArrayLike) -> None: ...
    def idle_gpus_fit(self) -> bool: ...
    def scenario_fit(self) -> bool: ...
    def capacity(self) -> NDArray[np.float64]: ...
    def available(self) -> NDArray[np.float64]: ...

# allocate: the allocate action's fused loop (inputs and result: kai.actions.fast_allocate)
def allocate_loop(inputs: dict[str, Any]) -> dict[str, Any]: ...

# NodePicker.pick for pods alike, the nodes grouped by score inputs
# (kai.actions.fast_allocate.AlikePicks)
class AlikePicks:
    def pick(
        self, idle: ArrayLike, releasing: ArrayLike, request: ArrayLike, nominated: int
    ) -> tuple[int, bool]: ...
    def changed(self, node: int) -> None: ...

# the loop's node choice for one task at a time (kai.actions.fast_allocate.NodePicker)
class NodePicker:
    def __init__(
        self,
        allocatable: ArrayLike,
        cap_gpu: ArrayLike,
        comps: ArrayLike,
        comp_scale: ArrayLike,
        gpu_col: int,
        cpu_col: int,
        gpu_binpack: bool,
        cpu_binpack: bool,
    ) -> None: ...
    def pick(
        self,
        idle: ArrayLike,
        releasing: ArrayLike,
        request: ArrayLike,
        masks: ArrayLike,
        nominated: int,
        portion: float,
        shared_idle: ArrayLike,
        shared_any: ArrayLike,
        within: ArrayLike | None,
    ) -> tuple[int, bool]: ...
    def alike(self, masks: ArrayLike, within: ArrayLike) -> AlikePicks:
        """``pick`` for pods alike placed one after another on these predicate masks
        (one constraint set) and nodes: report each node whose rows change between
        picks with ``AlikePicks.changed``."""
        ...
    def replace_victims(self, sim: object) -> tuple[int, NDArray[np.int64] | None]:
        """A simulation's re-placement (``sim``: a
        kai.actions.solvers.replacement.ReplacementArrays) as ``(outcome, steps)``.
        The re-placement is followed to its end.  Outcome 0: the preemptor is not
        placed whole in its turn, 1: it is (and every victim too), 2: it is and a
        victim is not, 3: undecided.  For outcome 1 or 2, ``steps`` are its [K, 3]
        rows (kind, a, b): 0 a participant's checkpoint, 1 a pod placed on a node, 2 a
        rollback to the checkpoint; else None."""
        ...
