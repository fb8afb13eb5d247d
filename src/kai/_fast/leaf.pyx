# cython: language_level=3, boundscheck=False, wraparound=False
"""Compiled reading of a victim leaf: ``kai.actions.solvers.victims._LeafSteps.read``.

A search reads the accepted jobs of a victim leaf once, in victim order, with each
one's eviction (:func:`kai.actions.solvers.batches.whole_job_eviction`). A leaf of a
large cluster holds tens of thousands of one-pod jobs, and a reclaim reads most of them
at its first probe: here the read loop and the eviction of a one-pod job on whole GPUs
(its batch and prepared additions written slot by slot) run without a Python frame per
job. The filter is still asked of each job through the candidates, and any other job's
eviction comes from ``whole_job_eviction``: the steps and memos are the same, object
for object, and the tests hold the two to it.
"""

import numpy as np

from kai.actions.solvers.batches import PreparedBatch, VictimBatch, whole_job_eviction
from kai.actions.solvers.victims import simple_step
from kai.api.model import ACTIVE_ALLOCATED
from kai.api.resources import GPU

from kai._fast.slots cimport layout, make

cdef tuple BATCH_FIELDS = ("job", "tasks", "nodes", "_uids", "_freed")
cdef tuple PREPARED_FIELDS = ("items", "nodes", "sums")
cdef Py_ssize_t BATCH_OFF[5]
cdef Py_ssize_t PREPARED_OFF[3]
cdef bint BATCH_DIRECT = layout(VictimBatch, BATCH_FIELDS, BATCH_OFF)
cdef bint PREPARED_DIRECT = layout(PreparedBatch, PREPARED_FIELDS, PREPARED_OFF)

cdef frozenset ACTIVE = ACTIVE_ALLOCATED
cdef Py_ssize_t GPU_COLUMN = GPU


cdef object _eviction(object ssn, object job, int* simple):
    """``whole_job_eviction(ssn, job)``, a one-pod job's made here: then ``simple`` is set
    to whether it is a simple step (:func:`simple_step`); it is left as it was (-1) when
    that is to be asked."""
    cdef list tasks = job.tasks
    if len(tasks) != 1:
        return whole_job_eviction(ssn, job)
    task = tasks[0]
    if task.status not in ACTIVE or not task.job.is_task_preemptible(task):
        return ([], False, None, None)
    cdef Py_ssize_t node = task.node
    if node < 0 or task.is_shared_gpu:
        return whole_job_eviction(ssn, job)
    request = task.request
    freed = float(request[GPU_COLUMN])
    whole = freed.is_integer()
    one = [task]
    at = node  # the node as a Python int, shared by the containers below
    batch = make(VictimBatch, BATCH_DIRECT, BATCH_OFF, (task.job, one, frozenset((at,)), None, None))
    prepared = make(
        PreparedBatch,
        PREPARED_DIRECT,
        PREPARED_OFF,
        ([(at, freed, request)], [at], [(at, freed, whole)]),
    )
    simple[0] = whole  # its one pod on a node, evicted whole: simple on whole GPUs
    return (one, False, batch, prepared)


def read(steps, ssn, Py_ssize_t count):
    """``steps.read(ssn, count)`` (a :class:`~kai.actions.solvers.victims._LeafSteps`),
    compiled: up to ``count`` more accepted jobs read; how many there were."""
    cands = steps._cands()
    assert cands is not None  # they outlive their steps
    accepted = steps._accepted
    accepts = cands.accepts
    cdef dict memo = cands.evictions
    cdef list entries = steps.entries
    cdef list positions = steps.positions
    cdef list neg = steps.neg
    cdef list gots = steps.gots
    cdef list batches = steps.batches
    cdef list simple_flags = steps._simple
    cdef dict simple_at = steps.simple_at
    cdef list accepted_neg = accepted.neg
    cdef Py_ssize_t below = (positions[len(positions) - 1] if positions else len(entries)) - 1
    cdef Py_ssize_t done, pos, p
    cdef bint simple
    cdef int made
    for done in range(count):
        # _Accepted.at_or_below(below, accepts): what was read already answers above
        # ``low``; below it, each job is asked in turn.
        if below < 0:
            return done
        if below >= accepted.low:
            pos = accepted.at_or_below(below, accepts)
        else:
            pos = -1
            while accepted.low > 0:
                accepted.low -= 1
                p = accepted.low
                if accepts((<tuple>entries[p])[2]):
                    accepted_neg.append(-p)
                    if p <= below:
                        pos = p
                        break
        if pos < 0:
            return done
        job = (<tuple>entries[pos])[2]
        got = memo.get(job)
        made = -1
        if got is None:
            got = memo[job] = _eviction(ssn, job, &made)
        positions.append(pos)
        neg.append(-pos)
        gots.append(got)
        batches.append((<tuple>got)[2])
        simple = made if made >= 0 else simple_step(job, got)
        simple_flags.append(simple)
        if simple:
            simple_at[(<tuple>got)[0][0]] = len(gots) - 1
        below = pos - 1
    return count


def extend_arrays(arrays, list simple, list gots):
    """``arrays.extend(simple, gots)`` (a
    :class:`~kai.actions.solvers.victims._StepArrays`), compiled: the columns of the
    steps from ``arrays.size`` on written in place."""
    cdef Py_ssize_t start = arrays.size, end = len(simple), i, j
    arrays.grow(end)
    cdef unsigned char[::1] flags = arrays.simple.view(np.uint8)
    cdef Py_ssize_t[::1] nodes = arrays.node
    cdef double[::1] freed = arrays.freed
    cdef double[:, ::1] rows = arrays.rows
    cdef const double[:] row
    cdef Py_ssize_t width = rows.shape[1]
    for i in range(start, end):
        if not simple[i]:
            flags[i] = 0
            continue
        flags[i] = 1
        node, gpus, request = (<list>(<tuple>gots[i])[3].items)[0]
        nodes[i] = node
        freed[i] = gpus
        row = request
        for j in range(width):
            rows[i, j] = row[j]
    arrays.size = end


def direct():
    """Whether batches and their prepared additions are written slot by slot."""
    return bool(BATCH_DIRECT and PREPARED_DIRECT)
