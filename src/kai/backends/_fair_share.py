"""KAI's division of one resource among sibling queues, written once for two backends.

:func:`divide` is plain Python in the subset Numba compiles: the Python backend runs it
on lists, and :mod:`kai.backends._numba_kernels` compiles it as it is for arrays.  It
calls no helper and allocates nothing (the caller passes its scratch buffers), so the
one body means the same under both; the native core's ``divide_fair_share``
(native/src/fairshare.cpp) performs the same operations in the same order, and the
backends' results are compared bit for bit by the tests.
"""

from __future__ import annotations

from typing import Any

from kai.backends._common import UNLIMITED


def divide(
    total: float,
    deserved: Any,
    limit: Any,
    weight: Any,
    request: Any,
    priority: Any,
    rank: Any,
    k_value: float,
    usage: Any,
    levels: Any,
    fair: Any,
    remainder: Any,
    share_weight: Any,
    requestable: Any,
    active: Any,
    order: Any,
) -> None:
    """Divide ``total`` units of one resource among sibling queues, into ``fair``.

    ``-1`` in ``deserved`` is an unlimited deserved quota, ``-1`` in ``limit`` no limit;
    a smaller ``rank`` (an older queue) wins ties.  ``levels`` are the distinct values
    of ``priority``, highest first.  ``fair``, ``remainder`` and ``share_weight`` start
    at 0; ``requestable`` (floats), ``active`` and ``order`` (integers) are scratch, one
    entry per queue.  Phases:

    1. the deserved quota, in index order (it may use up ``total``);
    2. over quota, per priority level from high to low, in weighted rounds that hand
       out whole units and keep each queue's fractional remainder;
    3. the units left, per priority level: one pass over the queues by remainder
       (largest first), rank, then index, each given ``min(1, remaining)``.
    """
    nq = len(deserved)
    # min(a, b) and max(a, b) are written as C++'s std::min and std::max compute them.
    for q in range(nq):
        if limit[q] == UNLIMITED:
            requestable[q] = request[q]
        else:
            requestable[q] = limit[q] if limit[q] < request[q] else request[q]

    # Phase 1: the deserved quota.
    remaining = total
    for q in range(nq):
        wanted = total if deserved[q] == UNLIMITED else deserved[q]
        amount = requestable[q] if requestable[q] < wanted else wanted
        fair[q] += amount
        remaining -= amount
    if remaining <= 0.0:
        return

    # Phase 2: over-quota rounds.
    for level in levels:
        if not remaining > 0.0:
            break
        while remaining > 0.0:
            n_active = 0
            total_weight = 0.0
            for q in range(nq):
                if priority[q] != level:
                    continue
                request_met = request[q] <= fair[q]
                limit_met = limit[q] != UNLIMITED and limit[q] <= fair[q]
                if request_met or limit_met:
                    continue  # satisfied
                active[n_active] = q
                n_active += 1
                if requestable[q] - fair[q] > 0.0:
                    total_weight += weight[q]
            if total_weight == 0.0:
                break
            sum_share_weight = 0.0
            for a in range(n_active):
                q = active[a]
                nw = weight[q] / total_weight
                sw = nw + k_value * (nw - usage[q])
                share_weight[q] = sw if 0.0 < sw else 0.0
                sum_share_weight += share_weight[q]
            if sum_share_weight == 0.0:
                break
            amount_this_round = remaining
            someone_needed_less = False
            changed = False
            for a in range(n_active):
                q = active[a]
                if not share_weight[q] > 0.0:
                    continue
                fair_q = amount_this_round * share_weight[q] / sum_share_weight
                need = requestable[q] - fair[q]
                before = fair[q]
                if need <= fair_q:
                    fair[q] += need
                    remaining -= need
                    someone_needed_less = True
                else:
                    # floor(fair_q), exact: here fair_q is finite (it is more than a
                    # finite need) and positive, and x % 1.0 is x's fraction exactly.
                    whole = fair_q - fair_q % 1.0
                    fair[q] += whole
                    remaining -= whole
                    remainder[q] = fair_q - whole
                if fair[q] != before:
                    changed = True
            if not someone_needed_less or not changed:
                break

    # Phase 3: the fractional units left, by remainder desc, rank asc, index asc.
    for level in levels:
        if not remaining > 0.0:
            break
        n_order = 0
        for q in range(nq):
            if priority[q] != level or not remainder[q] > 0.0:
                continue
            pos = n_order  # an insertion sort: a level holds a few queues
            while pos > 0:
                b = order[pos - 1]
                if remainder[q] != remainder[b]:
                    first = remainder[q] > remainder[b]
                elif rank[q] != rank[b]:
                    first = rank[q] < rank[b]
                else:
                    first = q < b
                if not first:
                    break
                order[pos] = b
                pos -= 1
            order[pos] = q
            n_order += 1
        for a in range(n_order):
            if not remaining > 0.0:
                break
            q = order[a]
            give = remaining if remaining < 1.0 else 1.0
            fair[q] += give
            remaining -= give
