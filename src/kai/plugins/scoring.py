"""Node and GPU scoring plugins.

The scores are KAI-Scheduler's constants, chosen so that the summed node score is
almost lexicographic: nominated node > shared-GPU fit > fits on idle capacity >
resource type > bin-packing/spreading.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from kai._dataclasses import dataclass
from kai.api.model import Job, NodeTable, Task
from kai.api.resources import CPU, GPU
from kai.framework import NodeInfo, Plugin, Session, register_plugin
from kai.framework.kernel import GpuOrderKind, KernelScore, ScoreKind

MAX_HIGH_DENSITY = 9.0
RESOURCE_TYPE = 10.0
AVAILABILITY = 1_000.0
GPU_SHARING = 10_000.0
NOMINATED_NODE = 10_000_000.0

GPU_COUNT_LABEL = "nvidia.com/gpu.count"


@dataclass(frozen=True, eq=False)  # arrays: compared by identity
class PlacementKernel:
    """Node placement for the compiled allocate loop: the strategy per kind of task and
    the GPU count spreading divides by."""

    gpu_binpack: bool
    cpu_binpack: bool
    gpu_capacity: np.ndarray


class NodePlacementPlugin(Plugin):
    """Bin-pack (default) or spread, separately for GPU and CPU-only workloads."""

    name = "nodeplacement"
    native_allocate = True
    kernel_score = KernelScore(ScoreKind.PLACEMENT, MAX_HIGH_DENSITY)
    arguments = ("gpu", "cpu")

    def __init__(self, args: Mapping[str, Any] | None = None) -> None:
        super().__init__(args)
        self.gpu = self.arg_choice("gpu", "binpack", ("binpack", "spread"))
        self.cpu = self.arg_choice("cpu", "binpack", ("binpack", "spread"))

    def on_session_open(self, ssn: Session) -> None:
        nodes = ssn.nodes
        self.gpu_capacity = gpu_capacity = nodes.derived(
            "nodeplacement.gpu_capacity", lambda: _labelled_gpu_capacity(nodes)
        )
        backend = ssn.backend

        def score(task: Task, job: Job, candidates: np.ndarray) -> np.ndarray:
            resource = GPU if task.requests_gpu else CPU
            strategy = self.gpu if task.requests_gpu else self.cpu
            non_allocated = nodes.idle[:, resource] + nodes.releasing[:, resource]
            if strategy == "binpack":
                return backend.binpack_score(
                    non_allocated,
                    nodes.allocatable[:, resource].copy(),
                    candidates,
                    MAX_HIGH_DENSITY,
                )
            capacity = gpu_capacity if resource == GPU else nodes.allocatable[:, CPU].copy()
            return backend.spread_score(non_allocated, capacity)

        ssn.add_batch_node_order_fn(score)

    def kernel_placement(self) -> PlacementKernel:
        return PlacementKernel(
            gpu_binpack=self.gpu == "binpack",
            cpu_binpack=self.cpu == "binpack",
            gpu_capacity=self.gpu_capacity,
        )


def _labelled_gpu_capacity(nodes: NodeTable) -> np.ndarray:
    """Each node's GPUs as its GPU count label gives them, else its allocatable GPUs."""
    gpu_capacity = nodes.allocatable[:, GPU].copy()
    for i, node in enumerate(nodes.objects):
        raw = node.labels.get(GPU_COUNT_LABEL)
        if raw:
            try:
                gpu_capacity[i] = float(raw)
            except ValueError:
                pass
    gpu_capacity.flags.writeable = False  # kept for the table's lifetime, shared
    return gpu_capacity


class NodeAvailabilityPlugin(Plugin):
    """Prefer nodes where the task fits on idle capacity (no pipelining needed)."""

    name = "nodeavailability"
    native_allocate = True
    kernel_score = KernelScore(ScoreKind.AVAILABILITY, AVAILABILITY)

    def on_session_open(self, ssn: Session) -> None:
        def score(task: Task, job: Job, candidates: np.ndarray) -> np.ndarray:
            return ssn.fits_idle(task).astype(np.float64) * AVAILABILITY

        ssn.add_batch_node_order_fn(score)


class GpuSharingOrderPlugin(Plugin):
    """Prefer nodes with an already shared GPU that has room for a fractional task."""

    name = "gpusharingorder"
    native_allocate = True
    kernel_score = KernelScore(ScoreKind.GPU_SHARING, GPU_SHARING)

    def on_session_open(self, ssn: Session) -> None:
        nodes = ssn.nodes

        def score(task: Task, job: Job, candidates: np.ndarray) -> np.ndarray:
            if not task.is_shared_gpu:
                return np.zeros(len(nodes), dtype=np.float64)
            fits = candidates & (nodes.shared_free_any + 1e-9 >= nodes.portions(task))
            return np.where(fits, GPU_SHARING, 0.0)

        ssn.add_batch_node_order_fn(score)


class ResourceTypePlugin(Plugin):
    """Keep CPU-only tasks on CPU-only nodes."""

    name = "resourcetype"
    native_allocate = True
    kernel_score = KernelScore(ScoreKind.RESOURCE_TYPE, RESOURCE_TYPE)

    def on_session_open(self, ssn: Session) -> None:
        cpu_only_nodes = (ssn.nodes.allocatable[:, GPU] <= 0).astype(np.float64) * RESOURCE_TYPE
        zero = np.zeros(len(ssn.nodes), dtype=np.float64)

        def score(task: Task, job: Job, candidates: np.ndarray) -> np.ndarray:
            return zero if task.requests_gpu else cpu_only_nodes

        ssn.add_batch_node_order_fn(score)


class NominatedNodePlugin(Plugin):
    """Strongly prefer the node named in ``status.nominatedNodeName``."""

    name = "nominatednode"
    native_allocate = True
    kernel_score = KernelScore(ScoreKind.NOMINATED, NOMINATED_NODE)

    def on_session_open(self, ssn: Session) -> None:
        index = ssn.nodes.index
        n = len(ssn.nodes)

        def score(task: Task, job: Job, candidates: np.ndarray) -> np.ndarray:
            out = np.zeros(n, dtype=np.float64)
            nominated = task.pod.nominated_node_name
            if nominated in index:
                out[index[nominated]] = NOMINATED_NODE
            return out

        ssn.add_batch_node_order_fn(score)


def _group_used(info: NodeInfo, group: str | None) -> float:
    if group is None:
        return 0.0
    g = info._ssn.nodes.gpu_groups[info.index].get(group)
    return g.used if g is not None else 0.0


class GpuPackPlugin(Plugin):
    """Put fractional tasks on the fullest shared GPU first."""

    name = "gpupack"
    native_allocate = True
    gpu_order_kind = GpuOrderKind.PACK

    def on_session_open(self, ssn: Session) -> None:
        ssn.add_gpu_order_fn(lambda task, info, group: _group_used(info, group))


class GpuSpreadPlugin(Plugin):
    """Put fractional tasks on the emptiest GPU first."""

    name = "gpuspread"
    native_allocate = True
    gpu_order_kind = GpuOrderKind.SPREAD

    def on_session_open(self, ssn: Session) -> None:
        ssn.add_gpu_order_fn(lambda task, info, group: 1.0 - _group_used(info, group))


register_plugin("nodeplacement", NodePlacementPlugin)
register_plugin("nodeavailability", NodeAvailabilityPlugin)
register_plugin("gpusharingorder", GpuSharingOrderPlugin)
register_plugin("resourcetype", ResourceTypePlugin)
register_plugin("nominatednode", NominatedNodePlugin)
register_plugin("gpupack", GpuPackPlugin)
register_plugin("gpuspread", GpuSpreadPlugin)
