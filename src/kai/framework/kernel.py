"""What a plugin declares so that the compiled allocate loop can run its part.

The loop (``native/src/allocate.cpp``, prepared by :mod:`kai.actions.fast_allocate`)
runs a plugin's rule itself only when the plugin says which rule it is and with what
parameters: a node score is a :class:`KernelScore`, a GPU order a
:class:`GpuOrderKind`; a plugin with state the loop must follow (loadaware) returns a
richer form from a ``kernel_form`` method.  A plugin that declares none of them makes
allocate take the general path.  The codes are those of ``native/include/kai/
allocate.hpp``.
"""

from __future__ import annotations

import enum

from kai._dataclasses import dataclass


class ScoreKind(enum.IntEnum):
    """The node scores the loop computes (allocate.hpp ``Comp``)."""

    AVAILABILITY = 1  # the task fits on idle capacity (no pipelining)
    GPU_SHARING = 2  # a shared device with room for the task's fraction
    RESOURCE_TYPE = 3  # a CPU-only task on a CPU-only node
    NOMINATED = 4  # the pod's nominated node
    PLACEMENT = 5  # binpack / spread (NodePlacementPlugin.kernel_placement)
    LOAD_AWARE = 6  # the loadaware plugin's score (LoadAwareKernel)


@dataclass(frozen=True)
class KernelScore:
    """A node score the loop computes: its kind and the score it gives (for
    placement, the most it gives; for load-aware, the weight of its 0..100 score)."""

    kind: ScoreKind
    score: float


class GpuOrderKind(enum.IntEnum):
    """How a GPU order plugin ranks a node's devices (allocate.hpp ``kGpuPack``...)."""

    PACK = 1  # by the share of the device in use, fullest first
    SPREAD = 2  # by the share free, emptiest first
