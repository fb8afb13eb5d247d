# cython: language_level=3, boundscheck=False, wraparound=False
"""Compiled counting bound of a victim-search probe's scenarios.

Before simulating a scenario, the search asks whether the GPU slots of the nodes it may
use could take the pending pods at all once the scenario's victims are gone
(:class:`kai.actions.solvers.job_solver._PlacementBound`). A probe's scenarios share its
recorded victims; each adds its batches' freed GPUs to a handful of nodes. With a
dozen batches to a scenario and tens of thousands of scenarios to a busy session, the
dictionary arithmetic of that check costs more than the simulations it saves.
:class:`SlotBound` keeps the probe's shared part in C arrays and adds the batches up
there. :class:`kai.actions.solvers.job_solver.SlotBound` stays the reference, and the
tests hold the two to the same answers.
"""

from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.math cimport floor

import numpy as np


cdef class SlotBound:
    """Whether whole-GPU pods asking for the sizes of ``needs`` could still fit the
    slots of a probe's nodes once a scenario's batches are evicted too.

    ``capacity``: per node, its GPUs once the recorded victims are gone; ``inside``: the
    nodes the simulation may use; ``needs``: per request size v, the pods asking for
    >= v GPUs; ``slots``: per size, the v-sized slots of the ``inside`` nodes.
    """

    cdef double* capacity
    cdef char* inside
    cdef double* value  # per touched node (by its place in ``order``), its GPUs now
    cdef Py_ssize_t* order  # the touched nodes, in the order first touched
    cdef Py_ssize_t* where  # per node, its place in ``order`` (-1: untouched)
    cdef Py_ssize_t n
    cdef Py_ssize_t sizes
    cdef double* size
    cdef long long* need
    cdef long long* slots
    cdef double slack

    def __cinit__(self, capacity, inside, list needs, list slots, double slack):
        cap = np.ascontiguousarray(capacity, dtype=np.float64)
        ins = np.ascontiguousarray(inside, dtype=np.bool_)
        cdef Py_ssize_t n = cap.shape[0], i
        if ins.shape[0] != n or len(slots) != len(needs):
            raise ValueError("SlotBound: capacity, inside, needs and slots disagree")
        self.n = n
        self.sizes = len(needs)
        self.slack = slack
        self.capacity = <double*>PyMem_Malloc(max(n, 1) * sizeof(double))
        self.inside = <char*>PyMem_Malloc(max(n, 1) * sizeof(char))
        self.value = <double*>PyMem_Malloc(max(n, 1) * sizeof(double))
        self.order = <Py_ssize_t*>PyMem_Malloc(max(n, 1) * sizeof(Py_ssize_t))
        self.where = <Py_ssize_t*>PyMem_Malloc(max(n, 1) * sizeof(Py_ssize_t))
        self.size = <double*>PyMem_Malloc(max(self.sizes, 1) * sizeof(double))
        self.need = <long long*>PyMem_Malloc(max(self.sizes, 1) * sizeof(long long))
        self.slots = <long long*>PyMem_Malloc(max(self.sizes, 1) * sizeof(long long))
        if (
            not self.capacity or not self.inside or not self.value or not self.order
            or not self.where or not self.size or not self.need or not self.slots
        ):
            raise MemoryError()
        cdef const double[::1] c = cap
        cdef const unsigned char[::1] m = ins.view(np.uint8)
        for i in range(n):
            self.capacity[i] = c[i]
            self.inside[i] = m[i] != 0
            self.where[i] = -1
        for i in range(self.sizes):
            v, k = needs[i]
            self.size[i] = v
            self.need[i] = k
            self.slots[i] = slots[i]

    def __dealloc__(self):
        PyMem_Free(self.capacity)
        PyMem_Free(self.inside)
        PyMem_Free(self.value)
        PyMem_Free(self.order)
        PyMem_Free(self.where)
        PyMem_Free(self.size)
        PyMem_Free(self.need)
        PyMem_Free(self.slots)

    def fits(self, list batches, object ssn) -> bool:
        """Whether the slots suffice once ``batches`` (VictimBatch, sharing no pod with
        each other nor with the recorded victims) are evicted as well."""
        cdef Py_ssize_t touched = 0, k, node, s
        cdef double freed, v, now
        cdef long long have
        cdef list per_node
        cdef tuple item
        try:
            for batch in batches:
                per_node = batch._freed
                if per_node is None:
                    per_node = batch.freed_per_node(ssn)
                for item in per_node:
                    node = item[0]
                    freed = item[1]
                    if node < 0 or node >= self.n:
                        raise IndexError(f"node {node} of {self.n}")
                    k = self.where[node]
                    if k < 0:
                        k = touched
                        self.where[node] = k
                        self.order[k] = node
                        self.value[k] = self.capacity[node]
                        touched += 1
                    self.value[k] = self.value[k] + freed
            for s in range(self.sizes):
                v = self.size[s]
                have = self.slots[s]
                for k in range(touched):
                    node = self.order[k]
                    if self.inside[node]:
                        have -= <long long>floor((self.capacity[node] + self.slack) / v)
                    now = self.value[k]
                    have += <long long>floor((now + self.slack) / v)
                if have < self.need[s]:
                    return False
            return True
        finally:
            for k in range(touched):
                self.where[self.order[k]] = -1
