"""Kernel backends: hand-computed cases + randomized equivalence of all backends.

The python backend is the reference; every other available backend (numba, native) must
return identical results (np.array_equal / exact int equality) for the same inputs.
Native comparisons are skipped when kai._native is not built.
"""

from __future__ import annotations

import numpy as np
import pytest

import kai.backends as kb
from kai.backends import EPS, get_backend

REFERENCE = "python"
OTHERS = ("numba", "native")
ALL = (REFERENCE, *OTHERS)


def _backend(name: str):
    try:
        return get_backend(name)
    except kb.BackendUnavailableError as exc:  # e.g. kai._native not built
        pytest.skip(f"backend {name!r} unavailable: {exc}")


@pytest.fixture(params=ALL)
def backend(request):
    return _backend(request.param)


@pytest.fixture(params=OTHERS)
def other(request):
    return _backend(request.param)


@pytest.fixture
def ref():
    return get_backend(REFERENCE)


def assert_same(expected, actual):
    """Exact equality of kernel outputs (arrays: dtype, shape and values)."""
    if isinstance(expected, tuple):
        assert isinstance(actual, tuple) and len(actual) == len(expected)
        for e, a in zip(expected, actual, strict=True):
            assert_same(e, a)
    elif isinstance(expected, np.ndarray):
        assert isinstance(actual, np.ndarray)
        assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
        assert actual.shape == expected.shape
        assert np.array_equal(actual, expected), (expected, actual)
    else:
        assert type(actual) is type(expected)
        assert actual == expected


def run_same(ref, other, kernel, *args):
    """Run ``kernel`` on both backends with copies of ``args``; check args untouched."""
    snapshot = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    expected = getattr(ref, kernel)(*args)
    actual = getattr(other, kernel)(*args)
    for before, after in zip(snapshot, args, strict=True):
        if isinstance(before, np.ndarray):
            assert np.array_equal(before, after), "kernel modified its input"
    assert_same(expected, actual)
    return expected


SIZES = (0, 1, 2, 3, 7, 16, 64, 257)


def _values(rng, shape, pool):
    """Mix of values from a small pool (ties, zeros) and continuous values."""
    discrete = rng.choice(np.asarray(pool, dtype=np.float64), size=shape)
    continuous = rng.uniform(-0.5, 1.5, size=shape) * max(abs(p) for p in pool)
    return np.where(rng.random(shape) < 0.6, discrete, continuous)


def _mask(rng, n, mode):
    if mode == "none":
        return np.zeros(n, dtype=np.bool_)
    if mode == "all":
        return np.ones(n, dtype=np.bool_)
    return rng.random(n) < 0.5


# ----------------------------------------------------------------------------- selection


def test_eps_and_kernels_exported():
    assert EPS == 1e-9
    assert set(kb.KERNELS) >= {
        "fit_mask",
        "binpack_score",
        "spread_score",
        "best_node",
        "ordered_nodes",
        "dominant_share",
        "divide_fair_share",
    }


def test_backend_objects(backend):
    assert backend.name in ALL
    for kernel in kb.KERNELS:
        assert callable(getattr(backend, kernel))
    assert get_backend(backend.name) is backend  # cached


def test_available_and_default(monkeypatch):
    names = kb.available_backends()
    assert REFERENCE in names
    assert names == [n for n in kb.BACKEND_NAMES if n in names]
    monkeypatch.delenv("KAI_BACKEND", raising=False)
    assert get_backend().name == names[0]


@pytest.mark.parametrize("name", ["python", "numba", "native"])
def test_env_var_selects_backend(monkeypatch, name):
    if name not in kb.available_backends():
        pytest.skip(f"{name} unavailable")
    monkeypatch.setenv("KAI_BACKEND", name.upper())
    assert get_backend().name == name


def test_unknown_backend_rejected(monkeypatch):
    with pytest.raises(ValueError, match="unknown kai backend"):
        get_backend("cuda")
    monkeypatch.setenv("KAI_BACKEND", "fortran")
    with pytest.raises(ValueError, match="fortran"):
        get_backend()


def test_native_module_matches_python_constants():
    native = pytest.importorskip("kai._native")
    assert native.EPS == EPS


# ----------------------------------------------------------------------------- fit_mask


def test_fit_mask_hand(backend):
    request = np.array([1000.0, 2e9, 1.0, 1.0])
    idle = np.array(
        [
            [1000.0, 2e9, 1.0, 10.0],  # exact fit in idle
            [500.0, 2e9, 1.0, 10.0],  # fits only with releasing
            [999.9999999995, 2e9, 1.0, 10.0],  # within EPS
            [0.0, 0.0, 0.0, 0.0],  # nothing
        ]
    )
    releasing = np.zeros_like(idle)
    releasing[1, 0] = 500.0
    fits_any, fits_idle = backend.fit_mask(request, idle, releasing)
    assert fits_any.dtype == np.bool_ and fits_idle.dtype == np.bool_
    assert fits_any.tolist() == [True, True, True, False]
    assert fits_idle.tolist() == [True, False, True, False]


def test_fit_mask_zero_request_always_passes(backend):
    request = np.array([100.0, 0.0, 0.0])
    idle = np.array([[100.0, -5.0, -1.0], [99.0, 10.0, 1.0]])
    fits_any, fits_idle = backend.fit_mask(request, idle, np.zeros_like(idle))
    assert fits_any.tolist() == [True, False]
    assert fits_idle.tolist() == [True, False]


def test_fit_mask_empty(backend):
    fits_any, fits_idle = backend.fit_mask(np.ones(4), np.zeros((0, 4)), np.zeros((0, 4)))
    assert fits_any.shape == (0,) and fits_idle.shape == (0,)
    fits_any, _ = backend.fit_mask(np.zeros(0), np.zeros((3, 0)), np.zeros((3, 0)))
    assert fits_any.tolist() == [True, True, True]


def test_fit_mask_shape_errors(backend):
    with pytest.raises(ValueError):
        backend.fit_mask(np.ones(3), np.zeros((2, 4)), np.zeros((2, 4)))
    with pytest.raises(ValueError):
        backend.fit_mask(np.ones(4), np.zeros((2, 4)), np.zeros((3, 4)))


@pytest.mark.parametrize("seed", range(6))
def test_fit_mask_equivalence(ref, other, seed):
    rng = np.random.default_rng(1000 + seed)
    for n in SIZES:
        for r in (0, 1, 4, 6):
            request = _values(rng, r, [0.0, 0.0, 1.0, 2.0, 4.0])
            idle = _values(rng, (n, r), [-1.0, 0.0, 1.0, 2.0, 4.0])
            releasing = _values(rng, (n, r), [0.0, 0.0, 1.0, 2.0])
            if n and r:  # boundary cases around EPS
                idle[0] = request - EPS / 2
                releasing[-1] = request - idle[-1] + EPS
            run_same(ref, other, "fit_mask", request, idle, releasing)


def test_fit_mask_accepts_other_layouts(ref, other):
    rng = np.random.default_rng(7)
    idle = np.asfortranarray(rng.integers(0, 4, size=(9, 5)).astype(np.float64))
    releasing = rng.integers(0, 3, size=(9, 10))[:, ::2]  # int, non-contiguous
    request = [1, 2, 0, 1, 3]
    run_same(ref, other, "fit_mask", request, idle, releasing)


# ----------------------------------------------------------------------------- scoring


def test_binpack_hand(backend):
    out = backend.binpack_score(np.array([1.0, 2.0, 3.0]), np.full(3, 4.0), np.ones(3, bool), 9.0)
    assert out.dtype == np.float64
    assert out.tolist() == [9.0, 4.5, 0.0]
    # Node without the resource scores 0; a non-candidate outside the range gets the
    # formula value (masked later by the framework).
    out = backend.binpack_score(
        np.array([2.0, 4.0, 8.0, 6.0]),
        np.array([8.0, 8.0, 0.0, 8.0]),
        np.array([True, True, True, False]),
        9.0,
    )
    assert out.tolist() == [9.0, 0.0, 0.0, 9.0 * (1.0 - (6.0 - 2.0) / (4.0 - 2.0))]
    # min == max -> the maximum; max == 0 -> 0; no candidate -> 0; any scale
    assert backend.binpack_score([3.0, 3.0], [4.0, 4.0], [True, True], 9.0).tolist() == [9.0, 9.0]
    assert backend.binpack_score([0.0, 0.0], [4.0, 4.0], [True, True], 9.0).tolist() == [0.0, 0.0]
    assert backend.binpack_score([1.0, 2.0], [4.0, 4.0], [False, False], 9.0).tolist() == [0.0, 0.0]
    assert backend.binpack_score([], [], [], 9.0).shape == (0,)
    assert backend.binpack_score([1.0, 3.0], [4.0, 4.0], [True, True], 2.0).tolist() == [2.0, 0.0]


@pytest.mark.parametrize("seed", range(6))
def test_binpack_equivalence(ref, other, seed):
    rng = np.random.default_rng(2000 + seed)
    for n in SIZES:
        for mode in ("none", "all", "random"):
            non_allocated = _values(rng, n, [0.0, 1.0, 2.0, 3.0, 8.0])
            allocatable = _values(rng, n, [-1.0, 0.0, 4.0, 8.0])
            candidates = _mask(rng, n, mode)
            run_same(ref, other, "binpack_score", non_allocated, allocatable, candidates, 9.0)
            flat = np.full(n, 2.0)  # min == max
            run_same(ref, other, "binpack_score", flat, np.abs(allocatable), candidates, 9.0)
            run_same(ref, other, "binpack_score", np.zeros(n), allocatable, candidates, 9.0)


def test_spread_hand(backend):
    out = backend.spread_score([1.0, 3.0, 5.0, 2.0], [4.0, 4.0, 0.0, -1.0])
    assert out.tolist() == [0.25, 0.75, 0.0, 0.0]


@pytest.mark.parametrize("seed", range(4))
def test_spread_equivalence(ref, other, seed):
    rng = np.random.default_rng(3000 + seed)
    for n in SIZES:
        run_same(
            ref,
            other,
            "spread_score",
            _values(rng, n, [0.0, 1.0, 3.0]),
            _values(rng, n, [-1.0, 0.0, 3.0, 7.0]),
        )


def test_best_node_hand(backend):
    assert backend.best_node([1.0, 5.0, 5.0, 2.0], [True] * 4) == 1
    assert backend.best_node([1.0, 5.0, 5.0, 2.0], [True, False, True, True]) == 2
    assert backend.best_node([-3.0, -1.0], [True, True]) == 1
    assert backend.best_node([1.0, 2.0], [False, False]) == -1
    assert backend.best_node([], []) == -1
    assert isinstance(backend.best_node([1.0], [True]), int)


def test_ordered_nodes_hand(backend):
    out = backend.ordered_nodes([1.0, 3.0, 3.0, 2.0, 9.0], [True, True, True, True, False])
    assert out.dtype == np.int64
    assert out.tolist() == [1, 2, 3, 0]
    assert backend.ordered_nodes([1.0], [False]).tolist() == []
    assert backend.ordered_nodes([], []).dtype == np.int64


@pytest.mark.parametrize("seed", range(6))
def test_selection_equivalence(ref, other, seed):
    rng = np.random.default_rng(4000 + seed)
    for n in SIZES:
        for mode in ("none", "all", "random"):
            scores = _values(rng, n, [0.0, 1.0, 4.5, 9.0, -2.0])
            mask = _mask(rng, n, mode)
            run_same(ref, other, "best_node", scores, mask)
            run_same(ref, other, "ordered_nodes", scores, mask)
            ties = np.round(scores)
            run_same(ref, other, "best_node", ties, mask)
            run_same(ref, other, "ordered_nodes", ties, mask)


# ----------------------------------------------------------------------------- fairshare


def test_dominant_share_hand(backend):
    allocated = np.array([[2.0, 1.0, 0.0], [0.0, 0.0, 8.0], [1.0, 3.0, 5.0]])
    total = np.array([4.0, 4.0, 0.0])
    assert backend.dominant_share(allocated, total).tolist() == [0.5, 0.0, 0.75]
    assert backend.dominant_share(allocated, np.zeros(3)).tolist() == [0.0, 0.0, 0.0]
    assert backend.dominant_share(np.zeros((0, 3)), total).shape == (0,)


@pytest.mark.parametrize("seed", range(4))
def test_dominant_share_equivalence(ref, other, seed):
    rng = np.random.default_rng(5000 + seed)
    for m in SIZES:
        for r in (0, 1, 3, 6):
            allocated = _values(rng, (m, r), [0.0, 1.0, 2.0, 5.0])
            total = _values(rng, r, [-1.0, 0.0, 4.0, 10.0])
            run_same(ref, other, "dominant_share", allocated, total)


def fair(
    backend,
    total,
    deserved,
    request,
    *,
    limit=None,
    weight=None,
    priority=None,
    rank=None,
    k_value=1.0,
    usage=None,
):
    q = len(deserved)
    return backend.divide_fair_share(
        total,
        np.asarray(deserved, dtype=np.float64),
        np.full(q, -1.0) if limit is None else np.asarray(limit, dtype=np.float64),
        np.ones(q) if weight is None else np.asarray(weight, dtype=np.float64),
        np.asarray(request, dtype=np.float64),
        np.zeros(q, np.int64) if priority is None else np.asarray(priority, np.int64),
        np.arange(q, dtype=np.int64) if rank is None else np.asarray(rank, np.int64),
        k_value,
        np.zeros(q) if usage is None else np.asarray(usage, dtype=np.float64),
    )


def test_fair_share_two_queues(backend):
    out = fair(backend, 10.0, [2.0, 0.0], [10.0, 10.0])
    assert out.dtype == np.float64
    assert out.tolist() == [6.0, 4.0]


def test_fair_share_leftover_unit_goes_by_rank(backend):
    # 10 / 3 = 3.33 each: floor 3 each, the single left-over unit goes to the lowest rank.
    assert fair(backend, 10.0, [0, 0, 0], [10, 10, 10]).tolist() == [4.0, 3.0, 3.0]
    assert fair(backend, 10.0, [0, 0, 0], [10, 10, 10], rank=[2, 0, 1]).tolist() == [
        3.0,
        4.0,
        3.0,
    ]


def test_fair_share_weights_and_remainders(backend):
    # weights 2:1 -> 6.67 / 3.33 -> floors 6 / 3, left-over unit to the larger remainder.
    assert fair(backend, 10.0, [0, 0], [10, 10], weight=[2, 1], k_value=0.0).tolist() == [
        7.0,
        3.0,
    ]


def test_fair_share_limits_and_extra_rounds(backend):
    # q0 is capped at 3, the surplus of its round goes to q1 in a second round.
    out = fair(backend, 10.0, [0, 0], [10, 10], limit=[3, -1], k_value=0.0)
    assert out.tolist() == [3.0, 7.0]


def test_fair_share_deserved_cases(backend):
    # Sum of deserved above total: returned as is.
    assert fair(backend, 5.0, [4, 4], [10, 10]).tolist() == [4.0, 4.0]
    # Unlimited deserved: capped by request, the rest goes over quota.
    assert fair(backend, 10.0, [-1, 0], [6, 10]).tolist() == [6.0, 4.0]
    # Deserved capped by the request.
    assert fair(backend, 10.0, [5, 5], [1, 2]).tolist() == [1.0, 2.0]
    assert fair(backend, 10.0, [], []).shape == (0,)


def test_fair_share_priority_groups(backend):
    assert fair(backend, 10.0, [0, 0], [10, 10], priority=[0, 1]).tolist() == [0.0, 10.0]
    # High priority is served first, the lower group gets what is left.
    assert fair(backend, 10.0, [0, 0, 0], [4, 10, 10], priority=[5, 1, 1]).tolist() == [
        4.0,
        3.0,
        3.0,
    ]


def test_fair_share_usage_penalty(backend):
    # nW = 0.5; shareWeight = max(0, 0.5 + 1 * (0.5 - usage)) = [0, 1]
    out = fair(backend, 10.0, [0, 0], [10, 10], usage=[1.0, 0.0], k_value=1.0)
    assert out.tolist() == [0.0, 10.0]
    # zero weights: nothing over quota
    assert fair(backend, 10.0, [1, 1], [10, 10], weight=[0, 0]).tolist() == [1.0, 1.0]


def _random_fair_inputs(rng, q):
    def pick(pool, p_pool=0.7, scale=20.0):
        discrete = rng.choice(np.asarray(pool, dtype=np.float64), size=q)
        return np.where(rng.random(q) < p_pool, discrete, rng.uniform(0, scale, q))

    total = float(rng.choice([0.0, 1.0, 7.0, 10.0, 100.0, rng.uniform(0, 50)]))
    deserved = pick([-1.0, 0.0, 0.0, 1.0, 2.0, 5.0])
    limit = pick([-1.0, -1.0, 0.0, 3.0, 10.0])
    weight = pick([0.0, 1.0, 1.0, 2.0, 0.5], scale=3.0)
    request = pick([0.0, 1.0, 4.0, 10.0, 50.0], scale=60.0)
    priority = rng.integers(0, 3, size=q).astype(np.int64)
    rank = rng.permutation(q).astype(np.int64)
    if rng.random() < 0.3:
        rank = np.zeros(q, dtype=np.int64)  # ties down to the index
    k_value = float(rng.choice([0.0, 0.5, 1.0, 2.0]))
    usage = np.where(rng.random(q) < 0.5, 0.0, np.round(rng.random(q), 2))
    return total, deserved, limit, weight, request, priority, rank, k_value, usage


@pytest.mark.parametrize("seed", range(8))
def test_fair_share_equivalence(ref, other, seed):
    rng = np.random.default_rng(6000 + seed)
    for q in (0, 1, 2, 3, 4, 5, 8, 13, 40):
        for _ in range(12):
            run_same(ref, other, "divide_fair_share", *_random_fair_inputs(rng, q))


def _random_tree_inputs(rng, q, r):
    """A random queue tree of ``q`` queues (parents among the earlier queues, with now
    and then a parent that names no queue or a cycle) and ``r`` resources."""
    parent = np.array([rng.integers(-1, i) if i else -1 for i in range(q)], dtype=np.int64)
    if q and rng.random() < 0.2:
        parent[rng.integers(0, q)] = q + 3  # names no queue: under the root
    if q > 2 and rng.random() < 0.2:
        a, b = rng.choice(q, size=2, replace=False)
        parent[a], parent[b] = b, a  # a cycle, which the root never reaches
    rows = [_random_fair_inputs(rng, q) for _ in range(r)]
    total = np.array([row[0] for row in rows])
    matrices = [np.array([row[i] for row in rows]).reshape(r, q) for i in (1, 2, 3, 4, 8)]
    deserved, limit, weight, request, usage = matrices
    priority = rng.integers(0, 3, size=q).astype(np.int64)
    rank = rng.permutation(q).astype(np.int64) if rng.random() < 0.7 else np.zeros(q, np.int64)
    k_value = float(rng.choice([0.0, 0.5, 1.0]))
    return total, parent, deserved, limit, weight, request, priority, rank, k_value, usage


@pytest.mark.parametrize("seed", range(6))
def test_fair_share_tree_equivalence(ref, other, seed):
    rng = np.random.default_rng(6100 + seed)
    for q in (0, 1, 2, 3, 6, 12, 30):
        for r in (1, 3, 4):
            for _ in range(6):
                run_same(ref, other, "divide_fair_share_tree", *_random_tree_inputs(rng, q, r))


def test_fair_share_tree_divides_each_parent_among_its_children(ref):
    """Each sibling group divides its parent's fair share (the root's: ``total``), one
    resource at a time, in rank order; queues the root never reaches get nothing."""
    rng = np.random.default_rng(61)
    for _ in range(200):
        q, r = int(rng.integers(1, 12)), 3
        args = _random_tree_inputs(rng, q, r)
        total, parent, deserved, limit, weight, request, priority, rank, k, usage = args
        fair = ref.divide_fair_share_tree(*args)
        assert fair.shape == (r, q)
        under = [int(p) if 0 <= p < q else -1 for p in parent]
        expected = np.zeros((r, q))
        reached = set()
        todo = [-1]
        while todo:
            p = todo.pop()
            kids = sorted((c for c in range(q) if under[c] == p), key=lambda c: (rank[c], c))
            for res in range(r):
                amount = total[res] if p < 0 else expected[res, p]
                expected[res, kids] = ref.divide_fair_share(
                    float(amount),
                    deserved[res, kids],
                    limit[res, kids],
                    weight[res, kids],
                    request[res, kids],
                    priority[kids],
                    rank[kids],
                    k,
                    usage[res, kids],
                )
            reached.update(kids)
            todo.extend(kids)
        assert fair.tolist() == expected.tolist()
        assert all(fair[:, c].tolist() == [0.0] * r for c in range(q) if c not in reached)


def test_fair_share_tree_rejects_bad_shapes(backend):
    total, parent, *matrices, k, usage = _random_tree_inputs(np.random.default_rng(5), 4, 3)
    deserved, limit, weight, request, priority, rank = matrices
    with pytest.raises(ValueError, match="limit"):
        backend.divide_fair_share_tree(
            total, parent, deserved, limit.T, weight, request, priority, rank, k, usage
        )
    with pytest.raises(ValueError, match="rank"):
        backend.divide_fair_share_tree(
            total, parent, deserved, limit, weight, request, priority, rank[:2], k, usage
        )


def test_fair_share_properties(ref):
    """Sanity of the reference: never negative, within total when deserved fits."""
    rng = np.random.default_rng(77)
    for _ in range(300):
        q = int(rng.integers(1, 10))
        args = _random_fair_inputs(rng, q)
        out = ref.divide_fair_share(*args)
        total, deserved, limit, _, request = args[:5]
        assert (out >= 0).all()
        requestable = np.where(limit == -1, request, np.minimum(request, limit))
        phase1 = np.minimum(np.where(deserved == -1, total, deserved), requestable)
        if phase1.sum() <= total:
            assert out.sum() <= total + 1e-9


def test_fair_share_shape_errors(backend):
    with pytest.raises(ValueError):
        backend.divide_fair_share(
            10.0, np.zeros(2), np.zeros(3), np.ones(2), np.ones(2),
            np.zeros(2, np.int64), np.zeros(2, np.int64), 1.0, np.zeros(2),
        )  # fmt: skip


def test_the_compiled_module_stubs_name_what_it_defines():
    # src/kai/_native.pyi types every public name of kai._native, and nothing else.
    import ast
    from pathlib import Path

    import kai

    _native = pytest.importorskip("kai._native")

    tree = ast.parse((Path(kai.__file__).parent / "_native.pyi").read_text())
    stubbed = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            stubbed.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            stubbed.add(node.target.id)
    public = {name for name in dir(_native) if not name.startswith("_")} | {"__version__"}
    assert stubbed == public
