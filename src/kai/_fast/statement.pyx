# cython: language_level=3, boundscheck=False, wraparound=False
"""Compiled runs of a statement's plain evictions and of their undo.

A victim-search simulation evicts all its victims through one statement and undoes
them all when it is discarded: a large reclaim evicts and restores tens of thousands
of pods per simulation. Most are plain (a pod the cluster runs on whole GPUs, turned
releasing on its node), and the statement records and undoes them as runs whose rows
and events are applied together. Here the per-pod part of a run, recording each
eviction's operation or taking it back off the operation list, is done without a
Python frame per pod. Every other operation is left to
:class:`kai.framework.statement.Statement`, and
:func:`kai.framework.statement.record_plain_evictions` and
:func:`kai.framework.statement.pop_plain_undos` stay the reference: both give the same
operations and state, and the tests hold them to it.
"""

from kai.api.model import Task
from kai.framework.statement import _ON_NODE, _PLACED_BY_SESSION, _Op

from kai._fast.fields cimport (
    T_COUNT, T_EVICTED, T_GPU_GROUP, T_NODE, T_STATUS, task_field, task_fields, task_shares_gpu,
)
from kai._fast.slots cimport get, layout, make

cdef type TASK_CLASS = Task
cdef Py_ssize_t TASK_OFF[T_COUNT]
cdef bint TASK_SLOTS = layout(Task, task_fields(), TASK_OFF)

cdef tuple OP_FIELDS = (
    "kind", "task", "prev_status", "prev_node", "prev_group", "prev_virtual", "reason",
    "undone", "ref", "held", "vacated", "retaken",
)
cdef enum:
    O_KIND, O_TASK, O_STATUS, O_NODE, O_GROUP, O_VIRTUAL, O_REASON, O_UNDONE, O_REF,
    O_HELD, O_VACATED, O_RETAKEN, O_COUNT
cdef type OP_CLASS = _Op
cdef Py_ssize_t OP_OFF[O_COUNT]
cdef bint OP_SLOTS = layout(_Op, OP_FIELDS, OP_OFF)

cdef frozenset ON_NODE = _ON_NODE
cdef frozenset PLACED_BY_SESSION = _PLACED_BY_SESSION
cdef str EVICT = "evict"


def record_plain_evictions(
    list tasks, Py_ssize_t start, object reason, list ops, dict standing, list run, set in_run
):
    """:func:`kai.framework.statement.record_plain_evictions`, compiled."""
    cdef Py_ssize_t i, n = len(tasks)
    cdef bint direct
    cdef list held
    for i in range(start, n):
        task = tasks[i]
        if task in in_run:
            return i
        direct = TASK_SLOTS and type(task) is TASK_CLASS
        status = task_field(task, direct, TASK_OFF, T_STATUS)
        node = task_field(task, direct, TASK_OFF, T_NODE)
        if status in PLACED_BY_SESSION or node < 0 or status not in ON_NODE:
            return i
        if task_shares_gpu(task, direct, TASK_OFF):
            return i
        op = make(
            OP_CLASS,
            OP_SLOTS,
            OP_OFF,
            (
                EVICT, task, status, node, task_field(task, direct, TASK_OFF, T_GPU_GROUP),
                task_field(task, direct, TASK_OFF, T_EVICTED), reason, False, None, -1, None,
                None,
            ),
        )
        ops.append(op)
        held = standing.get(task)
        if held is None:
            standing[task] = [op]
        else:
            held.append(op)
        run.append(task)
        in_run.add(task)
    return n


def pop_plain_undos(list ops, Py_ssize_t checkpoint, dict standing, list run, set in_run):
    """:func:`kai.framework.statement.pop_plain_undos`, compiled."""
    cdef bint direct, op_direct
    while len(ops) > checkpoint:
        op = ops[len(ops) - 1]
        op_direct = OP_SLOTS and type(op) is OP_CLASS
        if op_direct:
            kind, task = get(op, OP_OFF[O_KIND]), get(op, OP_OFF[O_TASK])
            undone, held = get(op, OP_OFF[O_UNDONE]), get(op, OP_OFF[O_HELD])
            prev_node, prev_status = get(op, OP_OFF[O_NODE]), get(op, OP_OFF[O_STATUS])
        else:
            kind, task, undone = op.kind, op.task, op.undone
            held, prev_node, prev_status = op.held, op.prev_node, op.prev_status
        if kind != EVICT or undone or held >= 0:
            return
        direct = TASK_SLOTS and type(task) is TASK_CLASS
        if not (task_field(task, direct, TASK_OFF, T_NODE) == prev_node >= 0):
            return
        if prev_status not in ON_NODE or task_shares_gpu(task, direct, TASK_OFF):
            return
        if task in in_run:
            return
        ops.pop()
        (<list>standing[task]).pop()
        run.append(op)
        in_run.add(task)


def direct():
    """Whether tasks are read and operations made slot by slot."""
    return bool(TASK_SLOTS and OP_SLOTS)
